//! Whether a fresh buffer should ask for 2 MiB huge pages.
//!
//! A buffer the size of a model is faulted in page by page on its first
//! write. Huge pages fault in 3x faster than 4 KiB ones when the kernel has
//! large free blocks backed by memory (1 GiB: 0.16 s against 0.47 s on one
//! core here), but two things turn them into a loss:
//! - fragmented memory: the kernel compacts it first, inside the page fault
//!   (THP defrag `madvise`), so a buffer asks only when twice its size is
//!   free in blocks of 2 MiB or more;
//! - free page reporting (a virtio balloon, as on this project's
//!   Firecracker VMs): the kernel hands free blocks of the reporting order
//!   or more back to the host, so a huge page cut from one waits for the
//!   host to back it again, while 4 KiB pages come first from the smaller
//!   free blocks, which are never reported. Measured here (reporting order
//!   9), 1 GiB of fresh memory in fresh processes: huge pages 0.1 to 2.9 s,
//!   4 KiB pages on two threads 0.28 to 0.41 s.

/// Buffers at least this large may ask for huge pages (and are aligned to
/// them by their allocator).
pub const HUGE_PAGE: usize = 2 << 20;

/// Whether a fresh buffer of `len` bytes should be advised for huge pages
/// (`MADV_HUGEPAGE`), judged from `/proc/buddyinfo` and the kernel's free
/// page reporting. False off Linux and wherever either cannot be read.
pub fn huge_pages_pay(len: usize) -> bool {
    #[cfg(target_os = "linux")]
    {
        // A reporting device registers at boot: asked once per process.
        static REPORTING: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let reporting = || {
            *REPORTING.get_or_init(|| {
                let order = std::fs::read_to_string("/sys/module/page_reporting/parameters/page_reporting_order");
                reporting_active(order.ok().as_deref())
            })
        };
        len >= HUGE_PAGE
            && !reporting()
            && std::fs::read_to_string("/proc/buddyinfo").is_ok_and(|info| free_huge_bytes(&info) / 2 >= len as u64)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = len;
        false
    }
}

/// Whether free page reporting is on, from its order parameter: absent on
/// kernels without it, `-1` (printed unsigned) until a device registers.
/// Linux's (tested everywhere: it parses text).
#[cfg(any(target_os = "linux", test))]
fn reporting_active(order: Option<&str>) -> bool {
    /// No page order reaches this (the largest is 10 or so).
    const NO_ORDER: u32 = 64;
    order.and_then(|o| o.trim().parse::<u32>().ok()).is_some_and(|o| o < NO_ORDER)
}

/// Bytes free in blocks of 2 MiB or more, from `/proc/buddyinfo`'s text:
/// per zone, the count of free blocks of each order, from order 0.
#[cfg(any(target_os = "linux", test))]
fn free_huge_bytes(buddyinfo: &str) -> u64 {
    const HUGE_ORDER: usize = 9; // 2^9 pages of 4 KiB = 2 MiB
    let mut free = 0u64;
    for line in buddyinfo.lines() {
        // "Node 0, zone   Normal  15480 16479 ..."
        let counts = line.split_whitespace().skip(4).filter_map(|c| c.parse::<u64>().ok());
        for (order, count) in counts.enumerate().skip(HUGE_ORDER) {
            free = free.saturating_add(count.saturating_mul(4096u64 << order));
        }
    }
    free
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reporting_is_active_only_with_a_registered_order() {
        assert!(reporting_active(Some("9\n")));
        assert!(reporting_active(Some("0")));
        // Before a device registers, the order reads -1 as an unsigned int.
        assert!(!reporting_active(Some("4294967295\n")));
        assert!(!reporting_active(Some("-1")));
        assert!(!reporting_active(Some("")));
        assert!(!reporting_active(None));
    }

    #[test]
    fn free_huge_bytes_counts_blocks_of_order_nine_and_up() {
        let info = "Node 0, zone      DMA      0      0      0      0      0      0      0      0      1      1      3 \n\
                    Node 0, zone   Normal  21063  29217  19708  12666   2820   2135    690    520    313     43   1657 \n";
        let mib = 1u64 << 20;
        // Orders 9 and 10: DMA 1 x 2 MiB + 3 x 4 MiB, Normal 43 x 2 MiB + 1657 x 4 MiB.
        assert_eq!(free_huge_bytes(info), (2 + 12 + 86 + 6628) * mib);
        assert_eq!(free_huge_bytes(""), 0);
        assert_eq!(free_huge_bytes("Node 0, zone Normal 1 2 x"), 0);
    }

    #[test]
    fn small_buffers_never_ask() {
        assert!(!huge_pages_pay(HUGE_PAGE - 1));
        assert!(!huge_pages_pay(0));
    }
}
