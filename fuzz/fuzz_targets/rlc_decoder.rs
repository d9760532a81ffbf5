//! Feeds the RLC / XOR decoder arbitrary sequences of source and repair symbols.
//!
//! Input layout: byte 0 picks the configuration (field, window), then records:
//! `[kind u8][esi u32 BE][nss u16 BE][key u16 BE][dt u8][len u16 BE][len bytes]`, truncated
//! records end the input. `kind & 3`: 0 source, 1 repair, 2 repair from a *real* encoder fed the
//! sources seen so far (so the decoder also gets deep into elimination, not only rejects),
//! 3 reset (with `kind & 0x40`: the span grows to repair lag `key % 4096` instead). The decoder
//! must never panic; every recovered symbol must have been pushed to the real encoder with
//! those exact bytes when the only repairs were genuine ones.
#![no_main]

use std::collections::HashMap;

use hirt_fec::rlc::{RlcConfig, RlcDecoder, RlcEncoder};
use hirt_fec::{FecDecoder, FecEncoder, RepairInfo, SchemeId};
use libfuzzer_sys::fuzz_target;

struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// Checks a recovered symbol against what the encoder was given, unless forged repairs (or a
/// reset) make wrong or repeated output legitimate.
fn checker(sent: &HashMap<u32, Vec<u8>>, forged: bool) -> impl FnMut(u32, &[u8]) + '_ {
    move |e, d| {
        if !forged {
            assert_eq!(sent.get(&e).map(|v| v.as_slice()), Some(d), "esi {e}");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut c = Cursor(data);
    let Some(sel) = c.u8() else { return };
    let window = [1u16, 4, 16, 200][(sel & 3) as usize];
    let cfg = if sel & 4 == 0 {
        RlcConfig::rlc(window)
    } else {
        RlcConfig::xor(window)
    };
    let mut dec = RlcDecoder::new(cfg);
    let mut enc = RlcEncoder::new(cfg);
    let mut sent: HashMap<u32, Vec<u8>> = HashMap::new();
    let mut next_esi: Option<u32> = None;
    let mut forged = false;
    loop {
        let (Some(kind), Some(esi), Some(nss), Some(key), Some(dt), Some(len)) =
            (c.u8(), c.u32(), c.u16(), c.u16(), c.u8(), c.u16())
        else {
            break;
        };
        let Some(bytes) = c.take(len as usize) else {
            break;
        };
        match kind & 3 {
            0 => {
                // Sources follow the encoder's numbering so genuine repairs stay consistent.
                let e = next_esi.unwrap_or(esi);
                next_esi = Some(e.wrapping_add(1));
                if bytes.len() <= hirt_fec::MAX_SYMBOL_LEN {
                    enc.push_source(e, bytes, &mut |_, _| {});
                    sent.insert(e, bytes.to_vec());
                }
                if kind & 0x80 == 0 {
                    let _ = dec.on_source(e, bytes, &mut checker(&sent, forged));
                }
            }
            1 => {
                forged = true;
                let scheme = SchemeId::from_u8(kind >> 2);
                let info = RepairInfo {
                    scheme,
                    first_esi: esi,
                    nss,
                    stride: 1,
                    repair_key: key,
                    dt,
                };
                let _ = dec.on_repair(&info, bytes, &mut checker(&sent, forged));
            }
            2 => {
                let mut rep = None;
                enc.repair_now(&mut |i, p| rep = Some((i, p.to_vec())));
                if let Some((i, p)) = rep {
                    let _ = dec.on_repair(&i, &p, &mut checker(&sent, forged));
                }
            }
            _ if kind & 0x40 != 0 => {
                // The decoder learning that repairs trail their sources: state is kept.
                dec.grow_repair_lag(u32::from(key) % 4096);
            }
            _ => {
                dec.reset();
                // Sources received before the reset may be delivered again afterwards.
                forged = true;
            }
        }
    }
});
