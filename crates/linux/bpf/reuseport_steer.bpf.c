// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * hirt's SO_REUSEPORT socket selector for the encrypted UDP mode's server (loaded by
 * crates/linux/src/xdp/reuseport.rs and attached with SO_ATTACH_REUSEPORT_EBPF).
 *
 * The server's workers share the listening port; the group has one socket per worker. The
 * client's worker `t` writes `t` into the top 6 bits of byte 1 of every datagram's payload
 * (the AEAD counter, see crates/linux/src/udp.rs). Handing the datagram to socket
 * `t mod socks` makes client worker `t` always reach server worker `t mod socks`, whatever the
 * kernel's hash of the 4-tuple would have chosen.
 *
 * The kernel runs the program as a socket filter with the skb's data at the UDP payload and
 * takes its return value as the socket's index in the group; an index out of range makes it
 * fall back to its hash (socket(7), SO_ATTACH_REUSEPORT_EBPF).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* Set by the loader: the number of sockets in the group (>= 1). */
const volatile __u32 socks = 1;

/* Out of range for any group: the kernel picks the socket by its hash. */
#define KERNEL_HASH 0xffffffff

SEC("socket")
int hirt_reuseport_steer(struct __sk_buff *skb)
{
	__u8 counter_byte;

	/* Socket filters have no direct packet access; the helper fails on a short datagram. */
	if (bpf_skb_load_bytes(skb, 1, &counter_byte, 1) < 0)
		return KERNEL_HASH;
	return (counter_byte >> 2) % socks;
}

/* The SPDX licence above, in the form the kernel reads. */
char LICENSE[] SEC("license") = "Dual MIT/GPL";
