//! Grantor calls made side by side, a bounded number at a time, on the lease manager's own
//! task (nothing is spawned, so a simulation's single thread still orders every call).

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

/// Runs `call` for each of `items`, at most `limit` at a time, and returns the outputs in
/// the order they finished.
pub(super) async fn bounded<I, T, F, Fut>(items: Vec<I>, limit: usize, mut call: F) -> Vec<T>
where
    F: FnMut(I) -> Fut,
    Fut: Future<Output = T>,
{
    let limit = limit.max(1);
    let mut pending = items.into_iter();
    let mut running: Vec<Pin<Box<Fut>>> = Vec::new();
    let mut out = Vec::new();
    loop {
        while running.len() < limit {
            match pending.next() {
                Some(item) => running.push(Box::pin(call(item))),
                None => break,
            }
        }
        if running.is_empty() {
            return out;
        }
        std::future::poll_fn(|cx| {
            let before = out.len();
            let mut i = 0;
            while i < running.len() {
                match running[i].as_mut().poll(cx) {
                    Poll::Ready(v) => {
                        out.push(v);
                        drop(running.swap_remove(i));
                    }
                    Poll::Pending => i += 1,
                }
            }
            if out.len() > before {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn every_call_finishes_and_no_more_than_the_limit_run_at_once() {
        let running = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        let out = bounded((0..50u64).collect(), 4, |i| {
            let (running, most) = (&running, &most);
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1 + i % 7)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                i
            }
        })
        .await;
        let mut out = out;
        out.sort_unstable();
        assert_eq!(out, (0..50).collect::<Vec<_>>());
        assert_eq!(most.load(Ordering::SeqCst), 4);
    }
}
