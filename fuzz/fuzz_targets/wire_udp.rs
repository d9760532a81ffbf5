#![no_main]
//! Untrusted (decrypted) UDP tunnel packets. Properties: no panic; what parses re-emits into a
//! packet that parses to the same value.

use hirt_wire::{UdpPacket, UdpRepr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(p) = UdpPacket::new_checked(data) else {
        return;
    };
    let _ = (p.kind(), p.stream(), p.path_id(), p.payload().len());
    let Ok(r) = UdpRepr::parse(&p) else { return };
    let mut buf = vec![0u8; r.buffer_len()];
    let n = r.emit(&mut buf).expect("buffer_len is enough");
    // Keepalives and path probes ignore trailing bytes (padding); every other type re-emits
    // byte for byte.
    let no_payload = matches!(
        r,
        UdpRepr::Keepalive { .. } | UdpRepr::Probe { .. } | UdpRepr::ProbeReply { .. }
    );
    assert!(n == data.len() || (no_payload && n < data.len()));
    let again = UdpRepr::parse(&UdpPacket::new_checked(&buf[..n]).unwrap()).unwrap();
    assert_eq!(again, r);
});
