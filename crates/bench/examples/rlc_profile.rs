//! Replays the 3 % loss RLC trace once through encoder and decoder, for profiling:
//! `valgrind --tool=callgrind target/release/examples/rlc_profile [loss] [packets]`.

fn main() {
    let mut args = std::env::args().skip(1);
    let loss = args.next().and_then(|a| a.parse().ok()).unwrap_or(0.03);
    let packets = args.next().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let (enc, dec, lost, recovered) = hirt_bench::rlc_bench::profile_once(loss, packets);
    println!(
        "loss {loss}: encoder {:.2} Mpps, decoder {:.2} Mpps, lost {lost}, recovered {recovered}",
        enc / 1e6,
        dec / 1e6
    );
}
