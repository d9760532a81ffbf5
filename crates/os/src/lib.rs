//! The operating-system plumbing of hirt, in one place, so the dataplane and the lab share one
//! implementation of each:
//!
//! - [`netlink`]: routes (plain, `seg6` encap, `seg6local` behaviours), policy rules, links,
//!   addresses and neighbours over rtnetlink; [`nexthop`]: cached link-layer next hops;
//! - [`netns`]: network namespaces for tests, benchmarks and the lab, veth pairs; [`nft`]: their
//!   nftables random-loss and counting rules;
//! - [`tun`]: TUN devices; [`ethtool`]: offloads and queue counts;
//! - [`runtime`]: shutdown on SIGINT/SIGTERM and worker loop timing;
//! - [`heap`]: the bytes held on the heap (a counting global allocator) and returning freed
//!   memory to the kernel.
//!
//! `unsafe` is confined to this crate's system calls (ioctl, setns, sockets); every block has a
//! `// SAFETY:` comment.
pub mod ethtool;
pub mod heap;
pub mod netlink;
pub mod netns;
pub mod nexthop;
pub mod nft;
pub mod runtime;
pub mod tun;
