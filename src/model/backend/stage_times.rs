//! Where a forward pass spends its time, for `hyoka bench --stage-times`.
//!
//! A GPU runs kernels asynchronously: a stage's wall time means nothing unless the device is
//! synchronised before and after it. With timing on, each timed stage is, and its time is added
//! to its total — its own time, without the stages timed inside it, so the totals add up to
//! the time timed. Synchronising serialises the device's queue: a run with timing on is slower,
//! and its totals are a breakdown, never the speed. Off (the default), a stage costs one atomic
//! load.

use candle_core::{Device, Result};
use std::cell::RefCell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

static ON: AtomicBool = AtomicBool::new(false);
static TOTALS: Mutex<Totals> = Mutex::new(Totals::new());

thread_local! {
    /// Per open stage on this thread: the time of the stages timed inside it so far.
    static OPEN: RefCell<Vec<Duration>> = const { RefCell::new(Vec::new()) };
}

/// Time stages from now on (for the rest of the process).
pub fn enable() {
    ON.store(true, Ordering::Relaxed);
}

/// Run `f` as `stage` on `device`: timed, with the device synchronised around it, when timing
/// is on.
pub fn time<T>(device: &Device, stage: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    if !ON.load(Ordering::Relaxed) {
        return f();
    }
    device.synchronize()?;
    OPEN.with(|o| o.borrow_mut().push(Duration::ZERO));
    let start = Instant::now();
    let out = f();
    let synced = device.synchronize();
    let elapsed = start.elapsed();
    let inner = OPEN.with(|o| {
        let mut open = o.borrow_mut();
        let inner = open.pop().unwrap_or_default();
        if let Some(parent) = open.last_mut() {
            *parent += elapsed;
        }
        inner
    });
    lock().add(stage, elapsed.saturating_sub(inner));
    let out = out?;
    synced?;
    Ok(out)
}

/// The totals since the last call, in the order the stages were first seen; starts anew.
pub fn take() -> Vec<StageTotal> {
    std::mem::take(&mut *lock()).0
}

fn lock() -> std::sync::MutexGuard<'static, Totals> {
    // A panic while holding the lock leaves the totals consistent (one push or one addition).
    TOTALS.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Clone, Debug, PartialEq)]
pub struct StageTotal {
    pub stage: &'static str,
    /// Own time: without the stages timed inside this one.
    pub seconds: f64,
    pub calls: u64,
}

#[derive(Default)]
struct Totals(Vec<StageTotal>);

impl Totals {
    const fn new() -> Self {
        Totals(Vec::new())
    }

    fn add(&mut self, stage: &'static str, time: Duration) {
        match self.0.iter_mut().find(|t| t.stage == stage) {
            Some(t) => {
                t.seconds += time.as_secs_f64();
                t.calls += 1;
            }
            None => self.0.push(StageTotal {
                stage,
                seconds: time.as_secs_f64(),
                calls: 1,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Own times: a stage's total leaves out what was timed inside it, so the totals add up to
    /// the outermost stage's time. (Timing stays on for this test process; other tests' stages
    /// land in the totals too, hence names of its own.)
    #[test]
    fn nested_stages_are_counted_once() {
        enable();
        let device = Device::Cpu;
        let outer = time(&device, "test: outer", || {
            let start = Instant::now();
            time(&device, "test: inner", || Ok(()))?;
            time(&device, "test: inner", || Ok(()))?;
            Ok(start.elapsed())
        })
        .unwrap();
        let totals: Vec<StageTotal> = take()
            .into_iter()
            .filter(|t| t.stage.starts_with("test: "))
            .collect();
        let names: Vec<_> = totals.iter().map(|t| (t.stage, t.calls)).collect();
        assert_eq!(names, [("test: inner", 2), ("test: outer", 1)]);
        let sum: f64 = totals.iter().map(|t| t.seconds).sum();
        assert!(sum >= outer.as_secs_f64(), "{sum} < {outer:?}");
        assert!(
            take().iter().all(|t| !t.stage.starts_with("test: ")),
            "take starts anew"
        );
    }
}
