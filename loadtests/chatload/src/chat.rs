//! One chat conversation on a text-generation sequence model (`tiny_chat`, the `llm` backend)
//! and the checks of its replies: the cross-talk check of the chat workload.
//!
//! Every turn sends the conversation's whole history in the model's chat template (as OpenAI
//! clients do) plus a new user message unique to the conversation and the turn; the engine's KV
//! cache holds the history, so the model runs only the new tokens. Decoding is greedy, so a reply
//! depends only on the prompt. Two checks:
//! - every turn: the server counted the prompt the client sent (`prompt_tokens` = the client's own token
//!   count of it) and reused exactly what this conversation's previous turn left in the cache
//!   (`cached_tokens` = the previous turn's prompt and reply minus its last sampled token, which is never
//!   run; 0 on a START). Another conversation's cache shares at most the template's first tokens with this
//!   prompt, and a lost or reset cache shares none.
//! - a sample of turns: the reply equals what a stateless request (sequence start and end at once, nothing
//!   cached) with the same prompt answers, so the cache changed nothing in it.

/// The model's chat template (config parameters `chat_template_message`, with `{role}` and
/// `{content}`, and `chat_template_generation`). The generation prompt followed by the reply must
/// be the start of the assistant message as the template renders it (true of tiny_chat's), so the
/// next turn's prompt starts with everything the cache holds.
#[derive(Debug, Clone)]
pub struct Template {
    pub message: String,
    pub generation: String,
}

impl Template {
    pub fn render(&self, role: &str, content: &str) -> String {
        self.message.replace("{role}", role).replace("{content}", content)
    }
}

/// What one turn sends.
#[derive(Debug, Clone)]
pub struct ChatTurn {
    /// The user message of this turn.
    pub user: String,
    /// The whole prompt: history, the user message, the generation prompt.
    pub prompt: String,
    pub start: bool,
}

/// The last response of a turn.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChatReply {
    pub text: String,
    pub finish_reason: String,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cached_tokens: i64,
}

impl ChatReply {
    /// Reads a reply from the model's outputs, by name: `text` decodes a string output and
    /// `int` an integer one, however the protocol carried them.
    pub fn read(
        text: impl Fn(&str) -> Result<String, String>,
        int: impl Fn(&str) -> Result<i64, String>,
    ) -> Result<ChatReply, String> {
        Ok(ChatReply {
            text: text("text_output")?,
            finish_reason: text("finish_reason")?,
            prompt_tokens: int("prompt_tokens")?,
            completion_tokens: int("completion_tokens")?,
            cached_tokens: int("cached_tokens")?,
        })
    }
}

/// A turn kept for the stateless reference check after the load.
#[derive(Debug, Clone)]
pub struct Sample {
    pub conversation: u64,
    pub prompt: String,
    pub reply: ChatReply,
}

/// What the load generator remembers of one chat conversation.
#[derive(Debug, Clone)]
pub struct ChatConversation {
    pub index: u64,
    pub sequence_id: u64,
    /// The rendered messages so far (no generation prompt).
    history: String,
    /// Turns answered since the last START.
    pub turns: u64,
    /// Turns sent over the conversation's life (makes every user message unique).
    sent: u64,
    /// The tokens this conversation's cache holds after its last answered turn.
    cached: i64,
    /// False until the first turn and after a failed or mismatched one: the next turn STARTs.
    pub open: bool,
    /// Turns before the conversation starts over (the context stays bounded).
    max_turns: u64,
}

impl ChatConversation {
    pub fn new(index: u64, sequence_id: u64, max_turns: u64) -> Self {
        ChatConversation {
            index,
            sequence_id,
            history: String::new(),
            turns: 0,
            sent: 0,
            cached: 0,
            open: false,
            max_turns: max_turns.max(1),
        }
    }

    pub fn next_turn(&mut self, template: &Template) -> ChatTurn {
        let start = !self.open || self.turns >= self.max_turns;
        let user = format!("c{} t{}: and then?", self.index, self.sent);
        self.sent += 1;
        let history = if start { "" } else { self.history.as_str() };
        let prompt = format!("{history}{}{}", template.render("user", &user), template.generation);
        ChatTurn { user, prompt, start }
    }

    /// Records the reply to `turn`, whose prompt the client counted as `prompt_tokens` tokens,
    /// and checks it against this conversation's own history. `Err` says what did not match.
    pub fn answer(
        &mut self,
        template: &Template,
        turn: &ChatTurn,
        reply: &ChatReply,
        prompt_tokens: usize,
    ) -> Result<(), String> {
        if turn.start {
            self.history.clear();
            self.turns = 0;
            self.cached = 0;
        }
        let expected_cached = self.cached;
        self.history += &template.render("user", &turn.user);
        self.history += &template.render("assistant", &reply.text);
        self.turns += 1;
        self.cached = reply.prompt_tokens + reply.completion_tokens - 1;
        let verdict = check_counts(reply, prompt_tokens as i64, expected_cached);
        // After a mismatch the server's state is not this conversation's: start over rather
        // than count every later turn.
        self.open = verdict.is_ok();
        verdict
    }

    /// A turn failed (error or timeout): the next turn starts the conversation again.
    pub fn failed(&mut self) {
        self.open = false;
    }
}

/// The counts of a turn's reply against the conversation's own history.
pub fn check_counts(reply: &ChatReply, prompt_tokens: i64, expected_cached: i64) -> Result<(), String> {
    if reply.prompt_tokens != prompt_tokens {
        return Err(format!("prompt_tokens {} where the prompt sent has {prompt_tokens}", reply.prompt_tokens));
    }
    if reply.cached_tokens != expected_cached {
        return Err(format!(
            "cached_tokens {} where the conversation's own history left {expected_cached} in its cache",
            reply.cached_tokens
        ));
    }
    if reply.completion_tokens < 1 {
        return Err(format!("completion_tokens {}", reply.completion_tokens));
    }
    Ok(())
}

/// A stateless request's reply to a sampled turn's prompt against the turn's own reply.
pub fn check_reference(sample: &Sample, reference: &ChatReply) -> Result<(), String> {
    let turn = &sample.reply;
    if reference.cached_tokens != 0 {
        return Err(format!("the stateless reference reused {} cached tokens", reference.cached_tokens));
    }
    if (&reference.text, &reference.finish_reason, reference.prompt_tokens, reference.completion_tokens)
        != (&turn.text, &turn.finish_reason, turn.prompt_tokens, turn.completion_tokens)
    {
        return Err(format!(
            "conversation {}: the turn answered {:?} ({}, {} + {} tokens), the stateless reference {:?} ({}, {} + {})",
            sample.conversation,
            turn.text,
            turn.finish_reason,
            turn.prompt_tokens,
            turn.completion_tokens,
            reference.text,
            reference.finish_reason,
            reference.prompt_tokens,
            reference.completion_tokens
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template() -> Template {
        Template { message: "<|{role}|>\n{content}<|end|>\n".into(), generation: "<|assistant|>\n".into() }
    }

    /// A byte tokenizer with the template's four specials as one token each, like tiny_chat's.
    fn tokens(text: &str) -> usize {
        let specials = ["<|user|>", "<|assistant|>", "<|end|>", "<|system|>"];
        let n: usize = specials.iter().map(|s| text.matches(s).count()).sum();
        let special_bytes: usize = specials.iter().map(|s| text.matches(s).count() * s.len()).sum();
        text.len() - special_bytes + n
    }

    fn reply(prompt: &str, text: &str, finish: &str, cached: i64) -> ChatReply {
        // A reply ended by the end token counts it; one cut by max_tokens does not.
        let completion = tokens(text) as i64 + i64::from(finish == "stop");
        ChatReply {
            text: text.into(),
            finish_reason: finish.into(),
            prompt_tokens: tokens(prompt) as i64,
            completion_tokens: completion,
            cached_tokens: cached,
        }
    }

    #[test]
    fn a_conversation_renders_its_own_history_and_expects_its_own_cache() {
        let t = template();
        let mut c = ChatConversation::new(7, 107, 20);
        let first = c.next_turn(&t);
        assert!(first.start);
        assert_eq!(first.prompt, "<|user|>\nc7 t0: and then?<|end|>\n<|assistant|>\n");
        let r1 = reply(&first.prompt, "hello there", "stop", 0);
        assert_eq!(c.answer(&t, &first, &r1, tokens(&first.prompt)), Ok(()));
        let second = c.next_turn(&t);
        assert!(!second.start);
        assert_eq!(
            second.prompt,
            "<|user|>\nc7 t0: and then?<|end|>\n<|assistant|>\nhello there<|end|>\n\
             <|user|>\nc7 t1: and then?<|end|>\n<|assistant|>\n"
        );
        // The cache holds the first prompt and the reply's tokens but not the end token (the
        // last sampled token is never run): exactly the second prompt's first tokens.
        let held = r1.prompt_tokens + r1.completion_tokens - 1;
        assert_eq!(held as usize, tokens("<|user|>\nc7 t0: and then?<|end|>\n<|assistant|>\nhello there"));
        let r2 = reply(&second.prompt, "abcdefgh", "length", held);
        assert_eq!(c.answer(&t, &second, &r2, tokens(&second.prompt)), Ok(()));
        // Cut by max_tokens: the last token was not run either.
        let third = c.next_turn(&t);
        let held = r2.prompt_tokens + r2.completion_tokens - 1;
        assert_eq!(held as usize, tokens(&second.prompt) + tokens("abcdefg"));
        assert!(third.prompt.starts_with(&second.prompt));
        let r3 = reply(&third.prompt, "x", "length", held);
        assert_eq!(c.answer(&t, &third, &r3, tokens(&third.prompt)), Ok(()));
    }

    #[test]
    fn another_conversations_cache_is_cross_talk() {
        let t = template();
        let mut a = ChatConversation::new(1, 1, 20);
        let a1 = a.next_turn(&t);
        a.answer(&t, &a1, &reply(&a1.prompt, "aaaa", "length", 0), tokens(&a1.prompt)).unwrap();
        let mut b = ChatConversation::new(2, 2, 20);
        let b1 = b.next_turn(&t);
        b.answer(&t, &b1, &reply(&b1.prompt, "bbbbbbbb", "length", 0), tokens(&b1.prompt)).unwrap();
        // b's second turn ran on a's cache: the common prefix is the template's "<|user|>\nc".
        let b2 = b.next_turn(&t);
        let wrong = reply(&b2.prompt, "zz", "length", 3);
        let e = b.answer(&t, &b2, &wrong, tokens(&b2.prompt)).unwrap_err();
        assert!(e.contains("cached_tokens 3"), "{e}");
        // The conversation starts over after a mismatch.
        assert!(b.next_turn(&t).start);
    }

    #[test]
    fn a_lost_cache_or_a_miscounted_prompt_is_caught() {
        let t = template();
        let mut c = ChatConversation::new(3, 3, 20);
        let c1 = c.next_turn(&t);
        c.answer(&t, &c1, &reply(&c1.prompt, "abc", "stop", 0), tokens(&c1.prompt)).unwrap();
        let c2 = c.next_turn(&t);
        // The server answered from an empty cache (a silent reset).
        assert!(c.answer(&t, &c2, &reply(&c2.prompt, "x", "stop", 0), tokens(&c2.prompt)).is_err());
        let c3 = c.next_turn(&t);
        assert!(c3.start);
        let mut r = reply(&c3.prompt, "x", "stop", 0);
        r.prompt_tokens += 1;
        let e = c.answer(&t, &c3, &r, tokens(&c3.prompt)).unwrap_err();
        assert!(e.contains("prompt_tokens"), "{e}");
    }

    #[test]
    fn conversations_start_over_after_max_turns_and_after_a_failure() {
        let t = template();
        let mut c = ChatConversation::new(4, 4, 2);
        for k in 0..2 {
            let turn = c.next_turn(&t);
            assert_eq!(turn.start, k == 0);
            let cached = if k == 0 { 0 } else { c.cached };
            c.answer(&t, &turn, &reply(&turn.prompt, "ab", "length", cached), tokens(&turn.prompt)).unwrap();
        }
        let again = c.next_turn(&t);
        assert!(again.start);
        assert_eq!(again.prompt, "<|user|>\nc4 t2: and then?<|end|>\n<|assistant|>\n", "messages stay unique");
        c.answer(&t, &again, &reply(&again.prompt, "ab", "length", 0), tokens(&again.prompt)).unwrap();
        assert!(!c.next_turn(&t).start);
        c.failed();
        assert!(c.next_turn(&t).start);
    }

    #[test]
    fn the_reference_must_give_the_same_reply_from_nothing_cached() {
        let turn = ChatReply {
            text: "abc".into(),
            finish_reason: "length".into(),
            prompt_tokens: 40,
            completion_tokens: 3,
            cached_tokens: 30,
        };
        let sample = Sample { conversation: 9, prompt: "p".into(), reply: turn.clone() };
        let same = ChatReply { cached_tokens: 0, ..turn.clone() };
        assert_eq!(check_reference(&sample, &same), Ok(()));
        let other_text = ChatReply { text: "abd".into(), ..same.clone() };
        assert!(check_reference(&sample, &other_text).unwrap_err().contains("conversation 9"));
        let other_finish = ChatReply { finish_reason: "stop".into(), ..same.clone() };
        assert!(check_reference(&sample, &other_finish).is_err());
        let cached = ChatReply { cached_tokens: 1, ..same };
        assert!(check_reference(&sample, &cached).unwrap_err().contains("stateless"));
    }
}
