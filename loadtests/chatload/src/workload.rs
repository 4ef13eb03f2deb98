//! What a turn sends and how its reply is checked, for the two workloads: the accumulator (a
//! running sum per conversation) and chat (a text-generation model whose KV cache is the
//! sequence's implicit state), over either protocol; and the stateless reference check of the
//! chat workload's sampled turns, run after the load.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokenizers::Tokenizer;

use crate::chat::{self, ChatConversation, ChatReply, Sample, Template};
use crate::conv::{Conversation, Stateless, Verdict};
use crate::{grpc, http};

pub enum Turns {
    Grpc(grpc::GrpcTurns),
    Http(http::HttpTurns),
}

impl Turns {
    async fn turn(&self, conversation: u64, sequence_id: u64, value: i32, start: bool) -> Result<i64, String> {
        match self {
            Turns::Grpc(g) => g.turn(conversation, sequence_id, value, start).await,
            Turns::Http(h) => h.turn(conversation, sequence_id, value, start).await,
        }
    }

    async fn add_sub(&self, conversation: u64, a: &[f32], b: &[f32]) -> Result<(Vec<f32>, Vec<f32>), String> {
        match self {
            Turns::Grpc(g) => g.add_sub(conversation, a, b).await,
            Turns::Http(h) => h.add_sub(conversation, a, b).await,
        }
    }

    async fn chat(
        &self,
        conversation: u64,
        sequence_id: u64,
        prompt: &str,
        (start, end): (bool, bool),
        max_tokens: i32,
        id: Option<String>,
    ) -> Result<ChatReply, String> {
        match self {
            Turns::Grpc(g) => g.chat(conversation, sequence_id, prompt, (start, end), max_tokens, id).await,
            Turns::Http(h) => h.chat(conversation, sequence_id, prompt, (start, end), max_tokens, id).await,
        }
    }

    pub fn stream_errors(&self) -> u64 {
        match self {
            Turns::Grpc(g) => g.stream_errors.load(Ordering::Relaxed),
            Turns::Http(_) => 0,
        }
    }

    /// The first error message a gRPC stream answered (they carry no request id), if any.
    pub fn stream_error(&self) -> String {
        match self {
            Turns::Grpc(g) => {
                g.first_stream_error.lock().unwrap().as_ref().map(|e| format!(": {e}")).unwrap_or_default()
            }
            Turns::Http(_) => String::new(),
        }
    }
}

/// The chat workload's settings.
pub struct ChatSetup {
    pub template: Template,
    pub tokenizer: Tokenizer,
    pub max_tokens: i32,
    /// Turns before a conversation starts over.
    pub max_turns: u64,
    /// Keep every n-th turn of the run for the stateless reference check (0: none).
    pub reference_every: u64,
}

impl ChatSetup {
    /// The client's own count of a prompt's tokens (as the server's backend encodes it: no
    /// special tokens added).
    fn tokens(&self, text: &str) -> Result<usize, String> {
        self.tokenizer.encode(text, false).map(|e| e.len()).map_err(|e| format!("tokenizer: {e}"))
    }
}

/// One conversation of a workload (a stateless client of add_sub for `--workload add-sub`).
pub enum Conv {
    Sum(Conversation),
    Chat(ChatConversation),
    Stateless(Stateless),
}

/// How a turn ended.
pub enum Outcome {
    Timeout,
    Error(String),
    /// Answered; `Some` says how the reply did not match the conversation's own history.
    Answered(Option<String>),
}

/// A turn's send and answer times, whether it STARTed its conversation, how it ended, and the
/// turn kept for the reference check.
pub struct Done {
    pub start: bool,
    pub sent: Instant,
    pub answered: Instant,
    pub outcome: Outcome,
    pub sample: Option<Sample>,
    /// A chat reply's prompt, completion and cached token counts.
    pub tokens: Option<[i64; 3]>,
}

impl Conv {
    pub fn new(chat: Option<&ChatSetup>, index: u64, sequence_id: u64) -> Conv {
        match chat {
            Some(c) => Conv::Chat(ChatConversation::new(index, sequence_id, c.max_turns)),
            None => Conv::Sum(Conversation::new(index, sequence_id)),
        }
    }

    /// Sends the conversation's next turn and checks the reply; `k` is the turn's number in the
    /// run (every `reference_every`-th answered chat turn is kept as a sample).
    pub async fn turn(
        &mut self,
        turns: &Turns,
        chat: Option<&ChatSetup>,
        index: u64,
        k: u64,
        timeout: Duration,
    ) -> Done {
        match (self, chat) {
            (Conv::Stateless(c), _) => {
                let (a, b) = c.next_inputs();
                let sent = Instant::now();
                let result = tokio::time::timeout(timeout, turns.add_sub(index, &a, &b)).await;
                let answered = Instant::now();
                let outcome = match result {
                    Err(_) => Outcome::Timeout,
                    Ok(Err(e)) => Outcome::Error(e),
                    Ok(Ok((sum, diff))) => Outcome::Answered(c.answer((&a, &b), (&sum, &diff)).err()),
                };
                Done { start: false, sent, answered, outcome, sample: None, tokens: None }
            }
            (Conv::Sum(c), _) => {
                let (value, start) = c.next_turn();
                let sent = Instant::now();
                let result = tokio::time::timeout(timeout, turns.turn(index, c.sequence_id, value, start)).await;
                let answered = Instant::now();
                let outcome = match result {
                    Err(_) => Outcome::Timeout,
                    Ok(Err(e)) => Outcome::Error(e),
                    Ok(Ok(reply)) => Outcome::Answered(match c.answer(value, start, reply) {
                        Verdict::Ok => None,
                        Verdict::Mismatch { expected, got } => Some(format!("expected {expected}, got {got}")),
                    }),
                };
                if !matches!(outcome, Outcome::Answered(_)) {
                    c.failed();
                }
                Done { start, sent, answered, outcome, sample: None, tokens: None }
            }
            (Conv::Chat(c), Some(setup)) => {
                let turn = c.next_turn(&setup.template);
                let sent = Instant::now();
                let flags = (turn.start, false);
                let result = tokio::time::timeout(
                    timeout,
                    turns.chat(index, c.sequence_id, &turn.prompt, flags, setup.max_tokens, Some(format!("t{k}"))),
                )
                .await;
                let answered = Instant::now();
                let mut tokens = None;
                let (outcome, sample) = match result {
                    Err(_) => (Outcome::Timeout, None),
                    Ok(Err(e)) => (Outcome::Error(e), None),
                    Ok(Ok(reply)) => {
                        tokens = Some([reply.prompt_tokens, reply.completion_tokens, reply.cached_tokens]);
                        let verdict =
                            setup.tokens(&turn.prompt).and_then(|n| c.answer(&setup.template, &turn, &reply, n)).err();
                        let keep = setup.reference_every > 0 && k.is_multiple_of(setup.reference_every);
                        let sample = keep.then_some(Sample { conversation: index, prompt: turn.prompt, reply });
                        (Outcome::Answered(verdict), sample)
                    }
                };
                if !matches!(outcome, Outcome::Answered(_)) {
                    c.failed();
                }
                Done { start: flags.0, sent, answered, outcome, sample, tokens }
            }
            (Conv::Chat(_), None) => unreachable!("a chat conversation without the chat setup"),
        }
    }

    /// Sends the next turn without START (after the idle timeout released the conversation):
    /// whether the server answered it.
    pub async fn turn_without_start(&mut self, turns: &Turns, chat: Option<&ChatSetup>) -> Result<(), String> {
        match (self, chat) {
            (Conv::Chat(c), Some(setup)) => {
                let turn = c.next_turn(&setup.template);
                turns.chat(0, c.sequence_id, &turn.prompt, (false, false), setup.max_tokens, None).await.map(|_| ())
            }
            (Conv::Sum(c), _) => turns.turn(0, c.sequence_id, c.next_turn().0, false).await.map(|_| ()),
            (Conv::Stateless(_), _) => Err("a stateless client has no sequence to release".into()),
            (Conv::Chat(_), None) => unreachable!("a chat conversation without the chat setup"),
        }
    }
}

/// The reference check's result.
#[derive(Debug, Default, Clone)]
pub struct References {
    pub checked: u64,
    pub mismatches: u64,
    pub errors: u64,
    pub first_problem: Option<String>,
}

/// Sends each sample's prompt as a stateless request (a fresh sequence id, START and END at
/// once: nothing cached, nothing kept), `concurrency` at a time, and compares the replies.
pub async fn check_references(
    turns: &Turns,
    setup: &ChatSetup,
    samples: Vec<Sample>,
    id_base: u64,
    concurrency: usize,
    timeout: Duration,
) -> References {
    let answers: Vec<(Sample, Result<ChatReply, String>)> =
        futures::stream::iter(samples.into_iter().enumerate().map(|(j, sample)| async move {
            let call = turns.chat(
                sample.conversation,
                id_base + j as u64,
                &sample.prompt,
                (true, true),
                setup.max_tokens,
                None,
            );
            let answer = match tokio::time::timeout(timeout, call).await {
                Ok(a) => a,
                Err(_) => Err(format!("no answer in {timeout:?}")),
            };
            (sample, answer)
        }))
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let mut r = References::default();
    for (sample, answer) in answers {
        let problem = match answer {
            Ok(reference) => {
                r.checked += 1;
                let verdict = chat::check_reference(&sample, &reference).err();
                r.mismatches += u64::from(verdict.is_some());
                verdict
            }
            Err(e) => {
                r.errors += 1;
                Some(format!("reference request for conversation {}: {e}", sample.conversation))
            }
        };
        if let Some(p) = problem {
            r.first_problem.get_or_insert(p);
        }
    }
    r
}
