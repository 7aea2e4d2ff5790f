//! Progress bars on stderr, for work long enough to want one.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Work below this many bytes gets no bar: it ends (at page-cache speed)
/// before a bar would be seen.
const MIN_BYTES: u64 = 256 << 20;

/// A bar over `total` bytes of work, drawn on stderr only when stderr is a
/// terminal (indicatif hides it otherwise) and the work is long.
pub fn bar(total: u64, message: &'static str) -> ProgressBar {
    if total < MIN_BYTES {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template("{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_message(message);
    bar
}
