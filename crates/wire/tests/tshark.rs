//! Cross-check with an independent decoder: write packets built by hirt-wire into a pcap and
//! let tshark (Wireshark's dissectors) decode them as IPv6 + SRH. Skips itself, with a message,
//! when tshark is not installed.

use std::io::Write;
use std::net::Ipv6Addr;
use std::process::Command;

use hirt_wire::srv6::{insert_source_tlv, Auth, Srv6Builder, Srv6Header};
use hirt_wire::{SourceRepr, TlvTypes};

fn pcap(packets: &[&[u8]]) -> Vec<u8> {
    let mut v = Vec::new();
    // Global header: magic, v2.4, tz 0, sigfigs 0, snaplen 65535, LINKTYPE_RAW (101).
    v.extend_from_slice(&0xa1b2c3d4u32.to_le_bytes());
    v.extend_from_slice(&2u16.to_le_bytes());
    v.extend_from_slice(&4u16.to_le_bytes());
    v.extend_from_slice(&[0; 8]);
    v.extend_from_slice(&65535u32.to_le_bytes());
    v.extend_from_slice(&101u32.to_le_bytes());
    for (i, p) in packets.iter().enumerate() {
        v.extend_from_slice(&(i as u32).to_le_bytes());
        v.extend_from_slice(&0u32.to_le_bytes());
        v.extend_from_slice(&(p.len() as u32).to_le_bytes());
        v.extend_from_slice(&(p.len() as u32).to_le_bytes());
        v.extend_from_slice(p);
    }
    v
}

#[test]
fn tshark_decodes_our_srh() {
    if Command::new("tshark").arg("--version").output().is_err() {
        eprintln!("tshark not installed: skipping");
        return;
    }
    let a = |s: &str| s.parse::<Ipv6Addr>().unwrap();
    let types = TlvTypes::default();
    let segs = [a("fc00::d"), a("fc00::e"), a("fc00::a")];

    // A repair-like packet with auth and an RFC 8754 HMAC TLV.
    let mut b1 = [0u8; 512];
    let auth = Auth {
        tlv_type: types.auth,
        key_id: 7,
        key: b"k",
        seq: 1,
        rfc8754_hmac: true,
    };
    let hdr = Srv6Header {
        src: a("2001:db8::1"),
        segments: &segs,
        segments_left: 2,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
        next_header: 59,
        tag: 0,
    };
    let mut bld = Srv6Builder::new(&mut b1, &hdr).unwrap();
    bld.push_source(
        types.source,
        &SourceRepr {
            stream: 1,
            esi: 0x01020304,
        },
    )
    .unwrap();
    let n1 = bld.finish(&[0xab; 20], Some(&auth)).unwrap();

    // A kernel-style encapsulated packet with an inner IPv6/UDP packet, plus our source TLV.
    let mut b2 = [0u8; 512];
    let inner_len = 48;
    let hdr2 = Srv6Header {
        next_header: 41,
        segments_left: 1,
        segments: &segs[..2],
        ..hdr
    };
    let mut inner = [0u8; 48];
    inner[0] = 0x60;
    inner[5] = 8;
    inner[6] = 17;
    inner[7] = 64;
    inner[8..24].copy_from_slice(&a("2001:db8:1::1").octets());
    inner[24..40].copy_from_slice(&a("2001:db8:2::1").octets());
    inner[40..48].copy_from_slice(&[0x30, 0x39, 0x30, 0x39, 0, 8, 0, 0]);
    let n2 = Srv6Builder::new(&mut b2, &hdr2)
        .unwrap()
        .finish(&inner[..inner_len], None)
        .unwrap();
    let n2 =
        insert_source_tlv(&mut b2, n2, types.source, &SourceRepr { stream: 2, esi: 9 }).unwrap();

    let dir = std::env::temp_dir().join(format!("hirt-wire-tshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("srh.pcap");
    std::fs::File::create(&file)
        .unwrap()
        .write_all(&pcap(&[&b1[..n1], &b2[..n2]]))
        .unwrap();
    let out = Command::new("tshark")
        .arg("-r")
        .arg(&file)
        .arg("-V")
        .output()
        .unwrap();
    if std::env::var_os("HIRT_KEEP_PCAP").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("Segment Routing"), "no SRH decoded:\n{text}");
    for s in ["fc00::d", "fc00::e", "fc00::a"] {
        assert!(text.contains(s), "segment {s} missing:\n{text}");
    }
    assert!(text.contains("Segments Left: 2"), "{text}");
    assert!(text.contains("Segments Left: 1"), "{text}");
    // The inner packet of the second frame is dissected as IPv6/UDP.
    assert!(
        text.contains("2001:db8:2::1") && text.contains("User Datagram Protocol"),
        "{text}"
    );
    assert!(
        !text.contains("Malformed"),
        "tshark reports a malformed packet:\n{text}"
    );
}
