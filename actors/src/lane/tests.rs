//! The lane's own tests, and the test model and helpers its other modules' tests share.

use std::time::{Duration, Instant};

use super::*;
use crate::backend::{InstanceKind, InstanceSpec};
use crate::clock::SystemClock;
use crate::mailbox::{mailbox, Receiver};
use crate::policy::{DynamicBatchPolicy, SequencePolicy, SequenceStrategy, DEFAULT_QUEUE_CAPACITY};
use crate::request::{InferRequest, Reply};

/// A model `m` of `instances` CPU instances, batches of up to 8 (also the lane's other
/// test modules' model).
pub(in crate::lane) fn policy(scheduler: SchedulerPolicy, instances: usize) -> ModelPolicy {
    ModelPolicy {
        name: "m".into(),
        version: 1,
        max_batch_size: 8,
        inputs: vec![],
        outputs: vec![],
        instances: (0..instances)
            .map(|index| InstanceSpec {
                name: format!("m_0_{index}"),
                index,
                kind: InstanceKind::Cpu,
                device: None,
                cpu_cores: Vec::new(),
                rate_limiter: Default::default(),
            })
            .collect(),
        scheduler,
        decoupled: false,
        queue_capacity: DEFAULT_QUEUE_CAPACITY,
        warmup: Vec::new(),
        response_cache: false,
    }
}

pub(in crate::lane) fn figures(p: &ModelPolicy) -> Arc<ModelFigures> {
    Arc::new(ModelFigures::new(p.instances.len()))
}

pub(in crate::lane) fn pending() -> Pending {
    let (reply, rx) = Reply::once();
    std::mem::forget(rx);
    let request = InferRequest::new("m", vec![]);
    Pending { request, reply, enqueued: Instant::now(), batch_size: 1, sequence: None, cache: None }
}

/// A lane whose instances are all up and free, with their mailboxes' receiving ends.
pub(in crate::lane) fn lane(p: &ModelPolicy) -> (Lane, Vec<Receiver<InstanceMsg>>) {
    let lane = Lane::new(p, Some(Arc::new(Mutex::new(Batcher::new(p)))), None, Arc::new(SystemClock), figures(p));
    let mut inboxes = Vec::new();
    for i in 0..p.instances.len() {
        let (tx, rx) = mailbox();
        lane.turn().up(i, 1, tx, None);
        inboxes.push(rx);
    }
    (lane, inboxes)
}

pub(in crate::lane) fn direct(r: Route) -> Option<usize> {
    match r {
        Route::Direct { instance, .. } => Some(instance),
        Route::Scheduler(_) | Route::Inline(..) | Route::Queued | Route::Refused(_) => None,
    }
}

#[test]
fn a_request_goes_straight_to_a_free_instance_when_nothing_is_queued() {
    let (lane, inboxes) = lane(&policy(SchedulerPolicy::Direct, 1));
    assert_eq!(direct(lane.route(pending(), false)), Some(0));
    assert!(matches!(inboxes[0].try_recv(), Ok(InstanceMsg::Execute(b)) if b.len() == 1));
    // The instance is busy now: the next request waits for it in the batcher.
    assert!(matches!(lane.route(pending(), false), Route::Queued));
}

#[test]
fn requests_on_their_way_to_the_scheduler_or_queued_there_keep_the_lane_shut() {
    let (lane, inboxes) = lane(&policy(SchedulerPolicy::Direct, 2));
    assert_eq!(direct(lane.route(pending(), false)), Some(1));
    inboxes[1].try_recv().unwrap();
    // Both free again, but a request is on its way to the scheduler: later ones follow it.
    lane.turn().release(1, 1);
    lane.state.lock().in_flight += 1;
    assert_eq!(direct(lane.route(pending(), false)), None);
    // The scheduler read both and queues one of them.
    lane.turn().publish(1, 2);
    assert_eq!(direct(lane.route(pending(), false)), None);
    lane.turn().publish(0, 1);
    assert_eq!(direct(lane.route(pending(), false)), Some(1));
}

#[test]
fn waiting_counts_requests_on_their_way_to_the_scheduler_and_queued_there() {
    let (lane, inboxes) = lane(&policy(SchedulerPolicy::Direct, 1));
    assert!(!lane.waiting());
    assert_eq!(direct(lane.route(pending(), false)), Some(0));
    inboxes[0].try_recv().unwrap();
    // The one running is not waiting.
    assert!(!lane.waiting());
    lane.state.lock().in_flight += 1;
    assert!(lane.waiting(), "on its way to the scheduler");
    lane.turn().publish(1, 1);
    assert!(lane.waiting(), "queued there");
    lane.turn().publish(0, 0);
    assert!(!lane.waiting());
    assert!(matches!(lane.route(pending(), false), Route::Queued));
    assert!(lane.waiting(), "queued in the batcher by the lane");
}

#[test]
fn a_send_that_fails_leaves_the_request_counted_as_on_its_way() {
    let timeout = crate::policy::QueuePolicy { default_timeout: Some(Duration::from_secs(1)), ..Default::default() };
    let timed = DynamicBatchPolicy { default_queue_policy: timeout, ..Default::default() };
    let (lane, inboxes) = lane(&policy(SchedulerPolicy::Dynamic(timed), 1));
    drop(inboxes);
    // The instance ended: the request goes to the scheduler, counted until it reads it.
    assert_eq!(direct(lane.route(pending(), false)), None);
    assert_eq!(lane.state.lock().in_flight, 1);
    lane.unsent();
    assert_eq!(lane.state.lock().in_flight, 0);
}

#[test]
fn a_send_that_fails_leaves_the_request_in_the_batcher_for_the_instances_successor() {
    let (lane, inboxes) = lane(&policy(SchedulerPolicy::Direct, 1));
    drop(inboxes);
    // The instance ended (the scheduler hears it from the supervisor, then its successor
    // is up and takes what waits): the request waits in the batcher, as in the scheduler.
    assert!(matches!(lane.route(pending(), false), Route::Queued));
    let s = lane.state.lock();
    assert_eq!((s.in_flight, s.queued, s.free.len()), (0, 1, 0));
}

#[test]
fn with_a_batching_delay_a_request_goes_direct_only_while_nothing_runs() {
    let dynamic = DynamicBatchPolicy { max_queue_delay: Duration::from_millis(1), ..Default::default() };
    let (lane, _inboxes) = lane(&policy(SchedulerPolicy::Dynamic(dynamic), 2));
    assert!(direct(lane.route(pending(), false)).is_some());
    // One instance runs: the batcher would let the next request wait for company.
    assert_eq!(direct(lane.route(pending(), false)), None);
    let no_delay = DynamicBatchPolicy { max_queue_delay: Duration::ZERO, ..Default::default() };
    let (lane, _inboxes) = self::lane(&policy(SchedulerPolicy::Dynamic(no_delay), 2));
    assert!(direct(lane.route(pending(), false)).is_some());
    assert!(direct(lane.route(pending(), false)).is_some());
}

#[test]
fn sequence_models_without_a_shared_batcher_go_through_the_scheduler() {
    let seq = SequencePolicy {
        strategy: SequenceStrategy::Direct,
        max_idle: Duration::from_secs(1),
        controls: Vec::new(),
        states: Vec::new(),
        max_backlog: 0,
        start_grace: Duration::ZERO,
        max_state_bytes: None,
        iterative: false,
    };
    let (lane, _inboxes) = lane(&policy(SchedulerPolicy::Sequence(seq), 1));
    assert_eq!(direct(lane.route(pending(), false)), None);
    assert_eq!(lane.finish(0, 1, Duration::ZERO).0, Finish::Scheduler);
}

#[test]
fn a_decoupled_models_request_goes_straight_to_the_free_instance_with_no_batching_delay() {
    // Its batcher runs each request alone, so a delay in its `dynamic_batching` holds nothing.
    let mut decoupled = policy(
        SchedulerPolicy::Dynamic(DynamicBatchPolicy { max_queue_delay: Duration::from_secs(60), ..Default::default() }),
        1,
    );
    decoupled.decoupled = true;
    let (lane, _inboxes) = self::lane(&decoupled);
    assert_eq!(direct(lane.route(pending(), false)), Some(0));
    assert_eq!(lane.finish(0, 1, Duration::ZERO).0, Finish::Freed, "nothing waits: free without a word");
}

#[test]
fn a_draining_model_takes_no_direct_request() {
    let (lane, _inboxes) = lane(&policy(SchedulerPolicy::Direct, 1));
    lane.turn().close();
    assert_eq!(direct(lane.route(pending(), false)), None);
}

#[test]
fn an_instance_with_nothing_waiting_frees_itself_without_a_message() {
    let (lane, inboxes) = lane(&policy(SchedulerPolicy::Direct, 1));
    assert_eq!(direct(lane.route(pending(), false)), Some(0));
    inboxes[0].try_recv().unwrap();
    assert_eq!(lane.finish(0, 1, Duration::ZERO).0, Finish::Freed);
    assert!(lane.turn().all_free());
    assert_eq!(direct(lane.route(pending(), false)), Some(0));
    // A stale generation (the instance was restarted) is not the lane's to free.
    assert_eq!(lane.finish(0, 7, Duration::ZERO).0, Finish::Scheduler);
    assert!(matches!(lane.pull(0, 7), (Pulled::NotMine, _)));
}

#[test]
fn an_instance_pulls_its_next_batch_from_the_batcher_while_requests_wait() {
    let p = policy(SchedulerPolicy::Direct, 1);
    let batcher = Arc::new(Mutex::new(Batcher::new(&p)));
    let lane = Lane::new(&p, Some(batcher.clone()), None, Arc::new(SystemClock), figures(&p));
    let (tx, _rx) = mailbox();
    lane.turn().up(0, 1, tx, None);
    assert_eq!(direct(lane.route(pending(), false)), Some(0));
    // Two requests arrive while the instance runs: they wait in the batcher.
    for _ in 0..2 {
        assert!(matches!(lane.route(pending(), false), Route::Queued), "the instance is busy");
    }
    assert_eq!(batcher.lock().len(), 2);
    assert_eq!(lane.finish(0, 1, Duration::ZERO).0, Finish::Pull);
    // The instance takes them one by one (no dynamic batching), the last leaving it free
    // with nothing for the scheduler to hear.
    assert!(matches!(lane.pull(0, 1), (Pulled::Batch(b), _) if b.len() == 1));
    assert!(!lane.turn().all_free());
    assert_eq!(lane.finish(0, 1, Duration::ZERO).0, Finish::Pull);
    assert!(matches!(lane.pull(0, 1), (Pulled::Batch(b), _) if b.len() == 1));
    assert_eq!(lane.finish(0, 1, Duration::ZERO).0, Finish::Freed);
    assert!(lane.turn().all_free());
}

#[test]
fn an_instance_tells_the_scheduler_when_requests_are_on_their_way_or_the_model_drains() {
    let (lane, inboxes) = lane(&policy(SchedulerPolicy::Direct, 1));
    assert_eq!(direct(lane.route(pending(), false)), Some(0));
    inboxes[0].try_recv().unwrap();
    // On its way to the scheduler, not in the batcher yet: the instance is free and the
    // scheduler must hear it.
    lane.state.lock().in_flight += 1;
    assert_eq!(lane.finish(0, 1, Duration::ZERO).0, Finish::Pull);
    assert!(matches!(lane.pull(0, 1), (Pulled::Free { tell: true }, _)));
    assert!(lane.turn().all_free());
    lane.turn().publish(0, 1);
    lane.turn().close();
    assert_eq!(lane.finish(0, 1, Duration::ZERO).0, Finish::Pull);
    assert!(matches!(lane.pull(0, 1), (Pulled::Free { tell: true }, _)));
}

#[test]
fn a_pull_fails_nothing_but_hands_back_the_requests_past_their_queue_timeout() {
    let dynamic = DynamicBatchPolicy {
        default_queue_policy: crate::policy::QueuePolicy {
            default_timeout: Some(Duration::from_millis(1)),
            ..Default::default()
        },
        ..Default::default()
    };
    let p = policy(SchedulerPolicy::Dynamic(dynamic), 1);
    let batcher = Arc::new(Mutex::new(Batcher::new(&p)));
    let lane = Lane::new(&p, Some(batcher.clone()), None, Arc::new(SystemClock), figures(&p));
    let (tx, _rx) = mailbox();
    lane.turn().up(0, 1, tx, None);
    assert_eq!(direct(lane.route(pending(), false)), Some(0));
    let Route::Scheduler(mut late) = lane.route(pending(), false) else { panic!("the instance is busy") };
    late.enqueued -= Duration::from_millis(5);
    batcher.lock().push(late).unwrap();
    lane.turn().publish(1, 1);
    let (pulled, expired) = lane.pull(0, 1);
    assert_eq!(expired.len(), 1);
    assert!(matches!(pulled, Pulled::Free { tell: false }));
}

#[test]
fn a_downed_instance_is_never_handed_a_request() {
    let (lane, _inboxes) = lane(&policy(SchedulerPolicy::Direct, 2));
    lane.turn().down(1);
    lane.turn().down(0);
    assert_eq!(direct(lane.route(pending(), false)), None);
    assert!(lane.turn().free().is_empty());
}
