#![no_main]
//! What a TUN device with offloads hands over (virtio_net_hdr + packet) and what the decoder
//! delivers for coalescing. Properties: no panic; every segment `split` makes fits its buffer
//! and is at most one segment size of payload past its headers; every coalesced write starts
//! with a virtio_net_hdr that parses and splits again without error.

use hirt_linux::udp::offload::{split, Coalescer, VnetHdr, VNET_HDR_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut read = data.to_vec();
    let mut out = vec![0u8; 70_000];
    let mut segs: Vec<Vec<u8>> = Vec::new();
    let _ = split(&mut read, &mut out, 16, |b, n| {
        segs.push(b[16..16 + n].to_vec())
    });
    // Coalesce both the segments and the raw input (as if the decoder delivered them).
    let mut c = Coalescer::default();
    let mut writes: Vec<Vec<u8>> = Vec::new();
    for s in segs.iter().chain(std::iter::once(&data.to_vec())) {
        c.push(s, &mut |w: &[u8]| writes.push(w.to_vec()));
    }
    c.flush(&mut |w: &[u8]| writes.push(w.to_vec()));
    for w in &mut writes {
        assert!(w.len() >= VNET_HDR_LEN);
        assert!(VnetHdr::parse(w).is_some());
        let mut n = 0;
        split(w, &mut out, 0, |_, _| n += 1).expect("a coalesced write splits again");
        assert!(n >= 1);
    }
});
