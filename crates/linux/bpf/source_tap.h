/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The source tap of sid_filter.bpf.c, for the decoder SID: sources that the kernel delivers
 * itself (its End.DT6 route decapsulates them) while hirt reads a copy from the ring.
 *
 * A frame to `tap_sid` whose SRH has Segments Left 0 and whose first TLV is of type `tap_tlv`
 * is copied into the ring (record: the IPv6 packet's length, 4 unused bytes, the packet) and
 * passed to the kernel. Anything else to the SID (repairs, feedback, a packet of more than
 * TAP_MAX_PACKET bytes) goes to the socket. A source that finds the ring full is dropped, so
 * that the decoder counts it lost and recovers it, rather than delivering it once through the
 * kernel and again when it recovers what it never saw.
 */
#ifndef HIRT_SOURCE_TAP_H
#define HIRT_SOURCE_TAP_H

#include "hirt_bpf.h"

/* The largest IPv6 packet copied into the ring. */
#define TAP_MAX_PACKET 2040
/* The smallest: an IPv6 header and an SRH with one segment (a bound for the verifier). */
#define TAP_MIN_PACKET (IPV6_HLEN + 8 + 16)
/* The action "to the AF_XDP socket" of the paths below. */
#define TO_SOCKET -1

/* One record of the ring; user space reads it as such (TAP_RECORD in xdp/bpf.rs). */
struct ring_record {
	__u32 len;
	/* The ESI a tag gave the source (unused by the tap). */
	__u32 esi;
	__u8 packet[TAP_MAX_PACKET];
};

/* Set by the loader. */
const volatile __u32 tap_on = 0;
const volatile struct sid tap_sid = {};
const volatile __u8 tap_tlv = 0;

/* Copies of the sources, for hirt; shared by the tap and the tag. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} ring SEC(".maps");

/*
 * A record of the ring holding the IPv6 packet of `ctx`, or NULL with *why: 1 when the packet
 * is too long, 2 when the ring is full. *copied is 0 when the packet was copied (the caller
 * submits or discards the record in any case).
 */
static __always_inline struct ring_record *ring_copy(struct xdp_md *ctx, int *why, long *copied)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 len = data_end - data - IPV6_OFF;
	struct ring_record *rec;

	if (len > TAP_MAX_PACKET || len < TAP_MIN_PACKET) {
		*why = 1;
		return NULL;
	}
	rec = bpf_ringbuf_reserve(&ring, sizeof(*rec), 0);
	if (!rec) {
		*why = 2;
		return NULL;
	}
	rec->len = len;
	rec->esi = 0;
	*copied = bpf_xdp_load_bytes(ctx, IPV6_OFF, rec->packet, len);
	return rec;
}

static __always_inline int source_tap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6_hdr *ip6 = data + IPV6_OFF;
	struct srh *srh;
	struct ring_record *rec;
	__u32 tlv, end;
	long copied;
	int why;

	/*
	 * Only receive queue 0 has the socket whose frames are ordered with the ring's records.
	 * Elsewhere the kernel would deliver a source hirt never sees and hirt would then recover
	 * it too: drop it instead (FEC recovers it once).
	 */
	if (ctx->rx_queue_index != 0)
		return XDP_DROP;
	if ((void *)(ip6 + 1) > data_end)
		return TO_SOCKET;
	srh = frame_srh(data, data_end, ip6);
	if (!srh || srh->segments_left != 0 || srh->last_entry > 7)
		return TO_SOCKET;
	/* The first TLV follows the segments, inside the SRH's (Hdr Ext Len + 1) x 8 bytes. */
	tlv = SEGS_OFF + 16 * (srh->last_entry + 1);
	end = SRH_OFF + 8 * (srh->hdr_ext_len + 1);
	if (end <= tlv)
		return TO_SOCKET;
	if (data + tlv + 1 > data_end)
		return TO_SOCKET;
	if (*(__u8 *)(data + tlv) != tap_tlv)
		return TO_SOCKET;
	rec = ring_copy(ctx, &why, &copied);
	if (!rec)
		return why == 1 ? TO_SOCKET : XDP_DROP;
	if (copied != 0) {
		rec->len = 0;
		bpf_ringbuf_submit(rec, BPF_RB_NO_WAKEUP);
		return XDP_DROP;
	}
	/* hirt polls the ring on its own schedule: no wake-up. */
	bpf_ringbuf_submit(rec, BPF_RB_NO_WAKEUP);
	return XDP_PASS;
}

#endif
