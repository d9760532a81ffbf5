//! Configuration files of both modes: any text either fails to parse or validate with an
//! error, or gives a configuration whose every derived value (SIDs, FEC mode, TLV types, keys,
//! coder settings, tunnel address) can be built. Nothing panics.
#![no_main]
use hirt_linux::config::{Srv6Config, UdpConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(c) = toml::from_str::<Srv6Config>(text) {
        if c.validate().is_ok() {
            c.enc_sid().expect("validated");
            c.dec_sid().expect("validated");
            c.fec_mode().expect("validated");
            c.tlv().expect("validated");
            c.auth().expect("validated");
            c.coder().expect("validated");
        }
    }
    if let Ok(c) = toml::from_str::<UdpConfig>(text) {
        if c.validate().is_ok() {
            let role = c.role().expect("validated");
            c.tun_addr(role).expect("validated");
            c.fec_mode().expect("validated");
            c.coder().expect("validated");
            let _ = c.handshake();
        }
    }
});
