//! libbpf's own messages go through nilb's logger (`tracing`), with their
//! level, instead of being printed raw to stderr as `libbpf: ...`: so
//! `--log-format json` gives one format on stderr, and `RUST_LOG` filters
//! them like everything else. libbpf's warnings become `WARN`, its info
//! `INFO`, its debug messages `DEBUG`; each event carries `source=libbpf`.
//!
//! The kernel's own explanation of a failed netlink request (its extended
//! ack, which libbpf prints as "Kernel error message: ...") is also kept, so
//! that an error hint can pass it on ([`take_kernel_message`], used for XDP
//! attach failures in [`super::hints`]).
//!
//! Some requests are expected to fail and libbpf still warns about them, e.g.
//! creating the clsact qdisc that already exists ("Exclusivity flag on,
//! cannot modify"). [`expect_failure`] marks such a section: its libbpf
//! warnings are logged at debug level.

use std::cell::Cell;
use std::sync::Mutex;

use libbpf_rs::PrintLevel;

/// The last "Kernel error message" libbpf reported.
static LAST_KERNEL_MESSAGE: Mutex<Option<String>> = Mutex::new(None);

thread_local! {
    /// Inside [`expect_failure`]: libbpf warnings are expected.
    static EXPECTED: Cell<bool> = const { Cell::new(false) };
}

/// Route libbpf's messages (all levels) through `tracing`. Call once at start.
pub fn install() {
    libbpf_rs::set_print(Some((PrintLevel::Debug, print)));
}

/// What one libbpf message becomes: its level (after [`expect_failure`]),
/// the text without the `libbpf: ` prefix and trailing newline, and the
/// kernel's message if it is one.
pub fn classify(
    level: PrintLevel,
    msg: &str,
    expected: bool,
) -> (PrintLevel, String, Option<String>) {
    let text = msg.trim_end();
    let text = text.strip_prefix("libbpf: ").unwrap_or(text).to_string();
    let kernel = text
        .strip_prefix("Kernel error message: ")
        .map(str::to_string);
    let level = match level {
        PrintLevel::Warn if expected => PrintLevel::Debug,
        l => l,
    };
    (level, text, kernel)
}

fn print(level: PrintLevel, msg: String) {
    let expected = EXPECTED.with(Cell::get);
    let (level, text, kernel) = classify(level, &msg, expected);
    if let Some(k) = kernel {
        if let Ok(mut last) = LAST_KERNEL_MESSAGE.lock() {
            *last = Some(k);
        }
    }
    match level {
        PrintLevel::Warn => tracing::warn!(source = "libbpf", "{text}"),
        PrintLevel::Info => tracing::info!(source = "libbpf", "{text}"),
        PrintLevel::Debug => tracing::debug!(source = "libbpf", "{text}"),
    }
}

/// Forget the last kernel message (before a request whose message matters).
pub fn clear_kernel_message() {
    if let Ok(mut last) = LAST_KERNEL_MESSAGE.lock() {
        *last = None;
    }
}

/// The kernel message of the last failed request since
/// [`clear_kernel_message`], if libbpf reported one.
pub fn take_kernel_message() -> Option<String> {
    LAST_KERNEL_MESSAGE.lock().ok().and_then(|mut l| l.take())
}

/// Run `f` with libbpf's warnings logged at debug level: for requests whose
/// failure is expected and handled (e.g. creating a qdisc that exists).
pub fn expect_failure<T>(f: impl FnOnce() -> T) -> T {
    let before = EXPECTED.with(|e| e.replace(true));
    let out = f();
    EXPECTED.with(|e| e.set(before));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_messages_are_recognised_and_prefixes_dropped() {
        let (level, text, kernel) = classify(
            PrintLevel::Warn,
            "libbpf: Kernel error message: virtio_net: Can't set XDP while host is implementing GRO_HW/CSUM, disable GRO_HW/CSUM first\n",
            false,
        );
        assert_eq!(level, PrintLevel::Warn);
        assert!(
            text.starts_with("Kernel error message: virtio_net:"),
            "{text}"
        );
        assert_eq!(
            kernel.as_deref(),
            Some("virtio_net: Can't set XDP while host is implementing GRO_HW/CSUM, disable GRO_HW/CSUM first")
        );
        let (level, text, kernel) = classify(
            PrintLevel::Warn,
            "libbpf: Kernel error message: Exclusivity flag on, cannot modify\n",
            true,
        );
        assert_eq!(
            level,
            PrintLevel::Debug,
            "expected failures are not warnings"
        );
        assert_eq!(
            text,
            "Kernel error message: Exclusivity flag on, cannot modify"
        );
        assert!(kernel.is_some());
        let (level, text, kernel) =
            classify(PrintLevel::Info, "libbpf: map 'services': created\n", false);
        assert_eq!(
            (level, text.as_str(), kernel),
            (PrintLevel::Info, "map 'services': created", None)
        );
    }
}
