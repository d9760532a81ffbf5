/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The source tag of sid_filter.bpf.c, for the encoder SID: sources that the program tags
 * itself and the kernel forwards, while hirt reads a copy to code repairs from.
 *
 * For a frame to `tag_sid` with an SRH of at most 8 segments, no TLV yet, Segments Left >= 1
 * and `tag_dec_sid` among the segments still to visit, of at most TAP_MAX_PACKET bytes, the
 * program copies the IPv6 packet as it arrived into the ring (record: its length and its ESI),
 * takes the ESI from the counter `esi`, does the End behaviour (Segments Left - 1, the next
 * segment as destination), inserts the 8-byte source TLV (`tag_tlv`, `tag_stream`, the ESI)
 * after the segments, exactly as hirt's own path does, and passes the frame to the kernel,
 * which forwards it. Feedback (Segments Left 0) goes to the AF_XDP socket; other frames to the
 * SID go to the kernel (its End route forwards them unprotected). A frame whose copy cannot be
 * made is passed untagged and counted in `untagged`; one that cannot be grown after its ESI
 * was taken is dropped (its copy is in the ring: the decoder recovers it).
 */
#ifndef HIRT_SOURCE_TAG_H
#define HIRT_SOURCE_TAG_H

#include "hirt_bpf.h"
#include "source_tap.h"

/* Bytes of the source TLV: type, length (6), stream (2 bytes), ESI (4 bytes). */
#define SOURCE_TLV 8
/* The largest SRH handled: 8 segments and the TLV (Hdr Ext Len in 8-byte units). */
#define MAX_SEGMENTS 8
/*
 * hirt is woken when the ring holds this many records it has not read: repairs are coded
 * within ~64 sources of their arrival (0.6 ms at 100 kpps; below ~32 kpps its 2 ms timer comes
 * first), at most one wake-up per 64 sources. The context that forwards the packet pays for
 * each wake-up.
 */
#define WAKE_BEHIND 64
/* What one record takes in the ring: the kernel's 8-byte header and the record, 8-aligned. */
#define RING_RECORD_BYTES ((8 + sizeof(struct ring_record) + 7) & ~7)

/* Why a source was passed on untagged: the keys of `untagged` (enum Untagged in Rust). */
enum untagged_reason {
	UNTAGGED_OTHER_QUEUE = 0,
	UNTAGGED_TOO_LONG = 1,
	UNTAGGED_RING_FULL = 2,
};

/* Set by the loader. */
const volatile __u32 tag_on = 0;
const volatile struct sid tag_sid = {};
const volatile struct sid tag_dec_sid = {};
const volatile __u8 tag_tlv = 0;
const volatile __u16 tag_stream = 0;

/* The next ESI. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} esi SEC(".maps");

/* Sources passed on untagged, by enum untagged_reason. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, __u64);
} untagged SEC(".maps");

static __always_inline int count_untagged(__u32 why)
{
	__u64 *n = bpf_map_lookup_elem(&untagged, &why);

	if (n)
		__sync_fetch_and_add(n, 1);
	return XDP_PASS;
}

/*
 * Whether the decoder SID is among segments 0..=last (those still to visit once this node's
 * End is done).
 */
static __always_inline int dec_sid_ahead(void *data, void *data_end, __u32 last)
{
#pragma clang loop unroll(full)
	for (__u32 k = 0; k < MAX_SEGMENTS; k++) {
		__u32 *seg = data + SEGS_OFF + 16 * k;

		if (k > last)
			return 0;
		if ((void *)(seg + 4) > data_end)
			return 0;
		if (sid_eq(seg, &tag_dec_sid))
			return 1;
	}
	return 0;
}

/*
 * The End behaviour and the TLV insertion (with `esi_value`) on the frame of `ctx`, whose SRH
 * has `sl` (1..=8) segments left; 0, or -1 when the frame cannot be changed.
 */
static __always_inline int end_and_insert(struct xdp_md *ctx, __u32 sl, __u32 esi_value)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6_hdr *ip6 = data + IPV6_OFF;
	struct srh *srh = data + SRH_OFF;
	__u32 next = sl - 1;
	__u32 *seg;
	__u64 tail_off;
	void *tail;
	__u8 *tlv;

	if ((void *)(srh + 1) > data_end)
		return -1;
	/* End: Segments Left - 1, the segment it now points at as destination. */
	srh->segments_left = next;
	seg = data + SEGS_OFF + 16 * (next & (MAX_SEGMENTS - 1));
	if ((void *)(seg + 4) > data_end)
		return -1;
	__builtin_memcpy(ip6->daddr, seg, 16);
	/*
	 * Ethernet, IPv6, the SRH: the headers that move 8 bytes to the front. `tail` is where
	 * their last 6 bytes go: (14 + 40 + 8 + 8 x Hdr Ext Len) - 6, kept as one non-negative
	 * offset because the verifier refuses negative offsets from a packet pointer with a
	 * variable part.
	 */
	if (srh->hdr_ext_len > 2 * MAX_SEGMENTS)
		return -1;
	tail_off = SEGS_OFF - 6 + 8 * (__u64)srh->hdr_ext_len;
	if (bpf_xdp_adjust_head(ctx, -SOURCE_TLV))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	/*
	 * 8-byte words up to the tail (the header length is 6 mod 8, and at least
	 * 14 + 40 + 8 + 16 = 78: words 0..8 always move).
	 */
#pragma clang loop unroll(full)
	for (__u64 w = 0; w < 23; w++) {
		if (w >= 9 && tail_off <= 8 * w)
			break;
		if (data + 8 * w + 16 > data_end)
			return -1;
		*(__u64 *)(data + 8 * w) = *(__u64 *)(data + 8 * w + 8);
	}
	/* The last 6 header bytes, then the TLV right after the headers. */
	tail = data + tail_off;
	if (tail + 6 + SOURCE_TLV > data_end)
		return -1;
	*(__u32 *)tail = *(__u32 *)(tail + 8);
	*(__u16 *)(tail + 4) = *(__u16 *)(tail + 12);
	tlv = tail + 6;
	tlv[0] = tag_tlv;
	tlv[1] = SOURCE_TLV - 2;
	*(__be16 *)(tlv + 2) = bpf_htons(tag_stream);
	*(__be32 *)(tlv + 4) = bpf_htonl(esi_value);
	/* Hdr Ext Len + 1, Payload Length + 8. */
	ip6 = data + IPV6_OFF;
	srh = data + SRH_OFF;
	if ((void *)(srh + 1) > data_end)
		return -1;
	srh->hdr_ext_len += 1;
	ip6->payload_len = bpf_htons(bpf_ntohs(ip6->payload_len) + SOURCE_TLV);
	return 0;
}

static __always_inline int source_tag(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6_hdr *ip6 = data + IPV6_OFF;
	struct ring_record *rec;
	struct srh *srh;
	__u32 key = 0, sl, *next_esi;
	__u64 wake;
	long copied;
	int why;

	/*
	 * Only frames of receive queue 0 are tagged: one NAPI context at a time, so the ESIs
	 * reach the ring in order. The kernel's End forwards the others unprotected.
	 */
	if (ctx->rx_queue_index != 0)
		return count_untagged(UNTAGGED_OTHER_QUEUE);
	if ((void *)(ip6 + 1) > data_end)
		return TO_SOCKET;
	srh = frame_srh(data, data_end, ip6);
	if (!srh)
		return TO_SOCKET;
	sl = srh->segments_left;
	/* Segments Left 0 is feedback (or not ours): the socket. */
	if (sl == 0)
		return TO_SOCKET;
	if (srh->last_entry > MAX_SEGMENTS - 1)
		return XDP_PASS;
	/* Hdr Ext Len must be exactly the segments: no TLV yet. */
	if (srh->hdr_ext_len != 2 * (srh->last_entry + 1))
		return XDP_PASS;
	if (sl > MAX_SEGMENTS)
		return XDP_PASS;
	if (!dec_sid_ahead(data, data_end, sl - 1))
		return XDP_PASS;

	rec = ring_copy(ctx, &why, &copied);
	if (!rec)
		return count_untagged(why == 1 ? UNTAGGED_TOO_LONG : UNTAGGED_RING_FULL);
	if (copied != 0) {
		bpf_ringbuf_discard(rec, 0);
		return XDP_PASS;
	}
	next_esi = bpf_map_lookup_elem(&esi, &key);
	if (!next_esi) {
		bpf_ringbuf_discard(rec, 0);
		return XDP_PASS;
	}
	/* The ESI is taken: from here on the record is submitted whatever happens. */
	rec->esi = __sync_fetch_and_add(next_esi, 1);
	if (end_and_insert(ctx, sl, rec->esi)) {
		bpf_ringbuf_submit(rec, BPF_RB_NO_WAKEUP);
		return XDP_DROP;
	}
	/*
	 * Wake hirt when this record leaves it exactly WAKE_BEHIND records behind (the records
	 * have one size, so the ring's unread bytes count them). Once per fall behind: a reader
	 * that is awake and keeping up is not woken, and one already woken is not woken again.
	 */
	wake = bpf_ringbuf_query(&ring, BPF_RB_AVAIL_DATA) == WAKE_BEHIND * RING_RECORD_BYTES
		       ? BPF_RB_FORCE_WAKEUP
		       : BPF_RB_NO_WAKEUP;
	bpf_ringbuf_submit(rec, wake);
	return XDP_PASS;
}

#endif
