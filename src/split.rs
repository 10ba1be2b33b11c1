//! Large, independent pieces of work (the table steps of a reload that
//! changes many services) split over
//! the CPUs the process may use (docs/design.md "Control plane"): the
//! calling thread and scoped helper threads take the items one at a time,
//! and the results come back in the order of the items, so the outcome is
//! the same as one thread's. Small work stays on the calling thread (starting
//! a thread costs tens of microseconds).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// Threads used at most, the calling one included.
pub const MAX_THREADS: usize = 4;

/// CPUs this process may run on (affinity and cgroup quota), read once.
fn cpus() -> usize {
    static CPUS: OnceLock<usize> = OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// CPU time the calling thread has used (µs).
pub fn thread_cpu_us() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(|t| t.tv_sec() as u64 * 1_000_000 + t.tv_nsec() as u64 / 1_000)
        .unwrap_or(0)
}

/// How many threads work of `total` units gets when each thread should
/// have at least `min_per_thread` units, with `cpus` CPUs.
pub fn threads_for(total: usize, min_per_thread: usize, cpus: usize) -> usize {
    (total / min_per_thread.max(1)).clamp(1, cpus.clamp(1, MAX_THREADS))
}

/// `f` of every item, in the items' order. Items are weighed with
/// `weight` (e.g. buckets); when there are at least two threads' worth of
/// `min_per_thread` units and more than one CPU, helper threads start and
/// every thread, the calling one included, takes the next item not yet
/// taken until none is left: a helper that waits for a CPU (a busy host)
/// leaves its share to the others instead of holding them up at the end.
/// Returns the results and the CPU time (µs) the helper threads used (0
/// when none ran), so that a caller that reports its own CPU time can count
/// theirs.
pub fn map<T, R, F>(
    items: Vec<T>,
    weight: impl Fn(&T) -> usize,
    min_per_thread: usize,
    f: F,
) -> (Vec<R>, u64)
where
    T: Send,
    R: Send,
    F: Fn(T) -> R + Sync,
{
    let total: usize = items.iter().map(&weight).sum();
    let threads = threads_for(total, min_per_thread, cpus()).min(items.len().max(1));
    if threads <= 1 {
        return (items.into_iter().map(f).collect(), 0);
    }
    let n = items.len();
    let slots: Vec<Mutex<Option<T>>> = items.into_iter().map(|t| Mutex::new(Some(t))).collect();
    let next = AtomicUsize::new(0);
    // Take items until none is left: (index, result) of each taken.
    let work = || {
        let mut done: Vec<(usize, R)> = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n {
                return done;
            }
            let item = slots[i]
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .expect("each index is taken once");
            done.push((i, f(item)));
        }
    };
    let work = &work;
    let (parts, cpu) = std::thread::scope(|s| {
        // A helper that cannot start leaves its share to the others.
        let helpers: Vec<_> = (1..threads)
            .filter_map(|_| {
                std::thread::Builder::new()
                    .name("nilb-split".into())
                    .spawn_scoped(s, move || {
                        let cpu0 = thread_cpu_us();
                        let done = work();
                        (done, thread_cpu_us().saturating_sub(cpu0))
                    })
                    .ok()
            })
            .collect();
        let mut parts = vec![work()];
        let mut cpu = 0u64;
        for h in helpers {
            let (done, c) = h.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
            parts.push(done);
            cpu += c;
        }
        (parts, cpu)
    });
    let mut out: Vec<Option<R>> = (0..n).map(|_| None).collect();
    for (i, r) in parts.into_iter().flatten() {
        out[i] = Some(r);
    }
    let out = out
        .into_iter()
        .map(|r| r.expect("every index is taken"))
        .collect();
    (out, cpu)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_follow_the_work_and_the_cpus() {
        assert_eq!(threads_for(0, 100, 8), 1);
        assert_eq!(threads_for(199, 100, 8), 1);
        assert_eq!(threads_for(200, 100, 8), 2);
        assert_eq!(threads_for(200, 100, 1), 1);
        assert_eq!(threads_for(10_000, 100, 2), 2);
        assert_eq!(threads_for(10_000, 100, 64), MAX_THREADS);
        assert_eq!(threads_for(10, 0, 2), 2);
    }

    #[test]
    fn results_keep_the_order_of_the_items() {
        let items: Vec<u64> = (0..1000).collect();
        let (out, _) = map(items.clone(), |&i| 1 + (i as usize % 7), 10, |i| i * 3);
        assert_eq!(out, items.iter().map(|i| i * 3).collect::<Vec<_>>());
        let (small, cpu) = map(vec![5u64], |_| 1, 10, |i| i + 1);
        assert_eq!((small, cpu), (vec![6], 0));
        let (none, _) = map(Vec::<u64>::new(), |_| 1, 1, |i| i);
        assert!(none.is_empty());
    }
}
