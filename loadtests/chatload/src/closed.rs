//! The closed loop (`--closed`): each of N conversations sends its next turn as soon as its
//! previous one is answered (zero think time), until the run's end; the server's saturation
//! throughput at N live conversations. Unlike the open loop (a fixed total rate, one turn due
//! every 1 / rate seconds), nothing paces the turns: the generator's cost per turn is one task
//! wake-up and one send, whatever N, so the throughput at N ÷ the throughput at 64 measures the
//! server, not the generator (perf_analyzer's own CPU per inference grows with its concurrency).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Runs `conversations` loops at once, each calling `turn(conversation, k)` again as soon as its
/// previous call returned, until `until`; `k` numbers the run's turns from 0 in the order they
/// started. No conversation has two turns in flight. Returns the number of turns started (each
/// was awaited to its end: a turn in flight at `until` finishes first). With `max_in_flight`,
/// at most that many turns are in flight at once, the others wait their turn in arrival order
/// (a fair semaphore): N conversations stay live while the server's queue holds at most that
/// many turns, so the sequence count and the queue's depth can be told apart.
pub async fn run<F, Fut>(conversations: u64, until: Instant, max_in_flight: Option<usize>, turn: F) -> u64
where
    F: Fn(u64, u64) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let next = Arc::new(AtomicU64::new(0));
    let permits = max_in_flight.map(|m| Arc::new(tokio::sync::Semaphore::new(m.max(1))));
    let mut loops = tokio::task::JoinSet::new();
    for conversation in 0..conversations {
        let (turn, next, permits) = (turn.clone(), next.clone(), permits.clone());
        loops.spawn(async move {
            while Instant::now() < until {
                let _permit = match &permits {
                    Some(p) => Some(p.acquire().await.expect("the semaphore is never closed")),
                    None => None,
                };
                if Instant::now() >= until {
                    break;
                }
                let k = next.fetch_add(1, Ordering::Relaxed);
                turn(conversation, k).await;
            }
        });
    }
    while let Some(done) = loops.join_next().await {
        if let Err(e) = done {
            if e.is_panic() {
                std::panic::resume_unwind(e.into_panic());
            }
        }
    }
    next.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;

    /// What the fake turns saw: turns per conversation, turns in flight per conversation and in
    /// all, and the largest of each.
    #[derive(Default)]
    struct Seen {
        per_conversation: Vec<u64>,
        in_flight: Vec<u32>,
        max_in_flight_one: u32,
        in_flight_all: u64,
        max_in_flight_all: u64,
        ks: Vec<u64>,
    }

    async fn drive(conversations: u64, run_for: Duration, turn_takes: Duration) -> (u64, Seen) {
        drive_capped(conversations, run_for, turn_takes, None).await
    }

    async fn drive_capped(
        conversations: u64,
        run_for: Duration,
        turn_takes: Duration,
        max_in_flight: Option<usize>,
    ) -> (u64, Seen) {
        let n = conversations as usize;
        let seen =
            Arc::new(Mutex::new(Seen { per_conversation: vec![0; n], in_flight: vec![0; n], ..Default::default() }));
        let s = seen.clone();
        let started = run(conversations, Instant::now() + run_for, max_in_flight, move |c, k| {
            let s = s.clone();
            async move {
                {
                    let mut s = s.lock().unwrap();
                    s.per_conversation[c as usize] += 1;
                    s.in_flight[c as usize] += 1;
                    s.max_in_flight_one = s.max_in_flight_one.max(s.in_flight[c as usize]);
                    s.in_flight_all += 1;
                    s.max_in_flight_all = s.max_in_flight_all.max(s.in_flight_all);
                    s.ks.push(k);
                }
                tokio::time::sleep(turn_takes).await;
                let mut s = s.lock().unwrap();
                s.in_flight[c as usize] -= 1;
                s.in_flight_all -= 1;
            }
        })
        .await;
        let seen = Arc::try_unwrap(seen).ok().unwrap().into_inner().unwrap();
        (started, seen)
    }

    #[tokio::test]
    async fn every_conversation_keeps_exactly_one_turn_in_flight() {
        let (started, seen) = drive(50, Duration::from_millis(200), Duration::from_millis(10)).await;
        assert_eq!(seen.max_in_flight_one, 1, "a conversation never has two turns in flight");
        assert_eq!(seen.max_in_flight_all, 50, "every conversation has its turn in flight at once");
        assert_eq!(seen.in_flight_all, 0, "every turn was awaited to its end");
        assert_eq!(started, seen.per_conversation.iter().sum::<u64>());
        // Zero think time: about 200 / 10 turns each (timer slack allowed), none starved.
        for (c, &turns) in seen.per_conversation.iter().enumerate() {
            assert!((5..=21).contains(&turns), "conversation {c}: {turns} turns");
        }
    }

    #[tokio::test]
    async fn a_cap_bounds_the_turns_in_flight_and_every_conversation_still_takes_turns() {
        let (started, seen) = drive_capped(40, Duration::from_millis(300), Duration::from_millis(5), Some(8)).await;
        assert_eq!(seen.max_in_flight_all, 8);
        assert_eq!(seen.max_in_flight_one, 1);
        assert_eq!(started, seen.per_conversation.iter().sum::<u64>());
        // 8 at a time, 5 ms each, for 300 ms: about 480 turns, shared fairly by the 40.
        for (c, &turns) in seen.per_conversation.iter().enumerate() {
            assert!((3..=15).contains(&turns), "conversation {c}: {turns} turns");
        }
    }

    #[tokio::test]
    async fn turn_numbers_are_unique_and_dense() {
        let (started, mut seen) = drive(7, Duration::from_millis(50), Duration::from_millis(2)).await;
        seen.ks.sort_unstable();
        assert_eq!(seen.ks, (0..started).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_run_that_has_ended_starts_no_turn() {
        let (started, seen) = drive(10, Duration::ZERO, Duration::from_millis(1)).await;
        assert_eq!(started, 0);
        assert!(seen.ks.is_empty());
    }

    #[tokio::test]
    async fn the_throughput_follows_the_turn_time_not_a_rate() {
        // Twice as fast turns: about twice the turns in the same time.
        let (slow, _) = drive(4, Duration::from_millis(300), Duration::from_millis(20)).await;
        let (fast, _) = drive(4, Duration::from_millis(300), Duration::from_millis(10)).await;
        assert!(fast as f64 >= 1.5 * slow as f64, "fast {fast}, slow {slow}");
    }
}
