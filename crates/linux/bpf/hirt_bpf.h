/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * What hirt's BPF programs share: packet layout (Ethernet, IPv6, the Segment Routing Header)
 * and small helpers. Only <linux/bpf.h> and libbpf's headers are included, so that the
 * objects do not depend on the build machine's other headers.
 */
#ifndef HIRT_BPF_H
#define HIRT_BPF_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define ETH_HLEN 14
#define ETH_P_IPV6 0x86DD
#define IPV6_HLEN 40
#define IPPROTO_ROUTING 43
/* Routing type of the SRH (RFC 8754). */
#define SRH_TYPE 4
/* Offsets in the frame: the IPv6 header, its destination address, the SRH, its segments. */
#define IPV6_OFF ETH_HLEN
#define SRH_OFF (IPV6_OFF + IPV6_HLEN)
#define SEGS_OFF (SRH_OFF + 8)

struct ipv6_hdr {
	__u8 version_class; /* version in the top 4 bits */
	__u8 class_flow[3];
	__be16 payload_len;
	__u8 next_header;
	__u8 hop_limit;
	__u32 saddr[4];
	__u32 daddr[4];
};

/* The fixed part of the Segment Routing Header; the segments (16 bytes each) follow. */
struct srh {
	__u8 next_header;
	__u8 hdr_ext_len; /* in 8-byte units, not counting the first 8 bytes */
	__u8 routing_type;
	__u8 segments_left;
	__u8 last_entry;
	__u8 flags;
	__be16 tag;
};

/* An IPv6 address as it lies in the packet: four words in network order. */
struct sid {
	__u32 w[4];
};

/* Whether the address at `a` (in bounds) equals `s`. */
static __always_inline int sid_eq(const __u32 *a, const volatile struct sid *s)
{
	return a[0] == s->w[0] && a[1] == s->w[1] && a[2] == s->w[2] && a[3] == s->w[3];
}

/* The IPv6 header of an Ethernet frame carrying IPv6, or NULL. */
static __always_inline struct ipv6_hdr *frame_ipv6(void *data, void *data_end)
{
	struct ipv6_hdr *ip6 = data + IPV6_OFF;

	if ((void *)(ip6 + 1) > data_end)
		return NULL;
	if (*(__be16 *)(data + 12) != bpf_htons(ETH_P_IPV6))
		return NULL;
	if ((ip6->version_class & 0xf0) != 0x60)
		return NULL;
	return ip6;
}

/* The SRH right after the IPv6 header, with its fixed part in bounds, or NULL. */
static __always_inline struct srh *frame_srh(void *data, void *data_end, struct ipv6_hdr *ip6)
{
	struct srh *srh = data + SRH_OFF;

	if (ip6->next_header != IPPROTO_ROUTING)
		return NULL;
	if ((void *)(srh + 1) > data_end)
		return NULL;
	if (srh->routing_type != SRH_TYPE)
		return NULL;
	return srh;
}

#endif
