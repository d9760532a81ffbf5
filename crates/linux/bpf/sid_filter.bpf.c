// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * hirt's XDP program for the SRv6 SIDs it owns (loaded by crates/linux/src/xdp/bpf.rs).
 *
 * A frame to one of our SIDs goes to the AF_XDP socket of its device and receive queue;
 * everything else (neighbour discovery, management traffic, the host's own flows) goes on to
 * the kernel untouched. Two optional paths let the kernel forward or deliver sources itself
 * while hirt reads copies of them from a ring buffer:
 *  - the source tap (source_tap.h), for the decoder SID;
 *  - the source tag (source_tag.h), for the encoder SID.
 * Which SIDs and paths are on is set in .rodata before load: the verifier sees the values and
 * drops the code of the paths that are off.
 */
#include "hirt_bpf.h"

#define MAX_SIDS 4
/* Devices that one loaded program serves; its XSKMAP has `queues` slots for each. */
#define MAX_DEVICES 8

/* Set by the loader. */
const volatile struct sid sids[MAX_SIDS] = {};
const volatile __u32 sid_count = 0;
/* Receive queues per device: the stride of the XSKMAP. */
const volatile __u32 queues = 1;

/* Slot `device * queues + receive queue`: the AF_XDP socket. */
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, MAX_DEVICES);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

/* ifindex -> device number (its block of `queues` slots in `xsks`), set at attach. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_DEVICES);
	__type(key, __u32);
	__type(value, __u32);
} devices SEC(".maps");

#include "source_tap.h"
#include "source_tag.h"

/*
 * To the AF_XDP socket of the frame's device and queue. To the kernel if it has none: the
 * device is not served, the queue is beyond `queues`, or its slot is empty (the fallback
 * action of bpf_redirect_map).
 */
static __always_inline int to_socket(struct xdp_md *ctx)
{
	__u32 ifindex = ctx->ingress_ifindex;
	__u32 queue = ctx->rx_queue_index;
	__u32 *device;

	if (queue >= queues)
		return XDP_PASS;
	device = bpf_map_lookup_elem(&devices, &ifindex);
	if (!device)
		return XDP_PASS;
	return bpf_redirect_map(&xsks, *device * queues + queue, XDP_PASS);
}

SEC("xdp")
int hirt_sids(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6_hdr *ip6 = frame_ipv6(data, data_end);
	int action;

	if (!ip6)
		return XDP_PASS;
	/* The tap's and the tag's SIDs are among `sids` (the loader checks). */
	if (tap_on && sid_eq(ip6->daddr, &tap_sid))
		action = source_tap(ctx);
	else if (tag_on && sid_eq(ip6->daddr, &tag_sid))
		action = source_tag(ctx);
	else {
		action = XDP_PASS;
#pragma clang loop unroll(full)
		for (int i = 0; i < MAX_SIDS; i++) {
			if (i < sid_count && sid_eq(ip6->daddr, &sids[i])) {
				action = TO_SOCKET;
				break;
			}
		}
	}
	return action == TO_SOCKET ? to_socket(ctx) : action;
}

/* The SPDX licence above, in the form the kernel reads: GPL-compatible, as helpers require. */
char LICENSE[] SEC("license") = "Dual MIT/GPL";
