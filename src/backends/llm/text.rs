//! The text of a reply as its tokens come: each token's piece is what the decoded reply gained,
//! held back while it ends in an incomplete UTF-8 character or in what could be the start of a
//! stop string, so a streaming client never sees a broken character or part of a stop string.
//! A stop string ends the reply at its first occurrence, itself not included (as OpenAI's `stop`).

use tokenizers::Tokenizer;
use tritium_actors::{Error, Result};

/// What the reply became after one more token.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// The text to send now (may be empty).
    Piece(String),
    /// A stop string was reached: the last text to send, up to it.
    Stopped(String),
}

pub struct Reply<'a> {
    tokenizer: &'a Tokenizer,
    stops: Vec<String>,
    ids: Vec<u32>,
    text: String,
    /// Bytes of `text` already sent.
    sent: usize,
}

impl<'a> Reply<'a> {
    pub fn new(tokenizer: &'a Tokenizer, stops: Vec<String>) -> Self {
        let stops = stops.into_iter().filter(|s| !s.is_empty()).collect();
        Reply { tokenizer, stops, ids: Vec::new(), text: String::new(), sent: 0 }
    }

    /// Adds a sampled token (special tokens decode to nothing).
    pub fn push(&mut self, token: u32) -> Result<Step> {
        self.ids.push(token);
        let text = self.tokenizer.decode(&self.ids, true).map_err(|e| Error::internal(format!("detokenizer: {e}")))?;
        if text.ends_with('\u{FFFD}') {
            // The bytes of a character still coming: wait for them.
            return Ok(Step::Piece(String::new()));
        }
        self.text = text;
        let first_stop = self.stops.iter().filter_map(|s| self.text.find(s.as_str())).min();
        if let Some(at) = first_stop {
            let piece = self.text.get(self.sent..at).unwrap_or("").to_string();
            self.text.truncate(at);
            self.sent = at;
            return Ok(Step::Stopped(piece));
        }
        let safe = self.text.len() - self.held_back();
        let piece = self.text[self.sent..safe].to_string();
        self.sent = safe;
        Ok(Step::Piece(piece))
    }

    /// The longest end of the text that begins some stop string (at a character boundary).
    fn held_back(&self) -> usize {
        let mut held = 0;
        for stop in &self.stops {
            for (i, _) in stop.char_indices().skip(1) {
                if i > held && self.text.ends_with(&stop[..i]) {
                    held = i;
                }
            }
        }
        held.min(self.text.len() - self.sent)
    }

    /// What is left to send at the end (text held back for a stop string that did not come).
    pub fn rest(&mut self) -> String {
        let piece = self.text[self.sent..].to_string();
        self.sent = self.text.len();
        piece
    }

    /// The whole reply so far.
    #[cfg(test)]
    pub fn text(&self) -> &str {
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use tokenizers::models::bpe::BPE;
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;

    use super::*;

    /// A byte-level tokenizer with one token per byte (id = byte), as tiny_chat's.
    fn bytes_tokenizer() -> Tokenizer {
        let alphabet = ByteLevel::alphabet();
        let mut pairs: Vec<(u8, char)> = Vec::new();
        // GPT-2's mapping: printable bytes map to themselves, the others to 256 + n.
        let mut n = 0u32;
        for b in 0..=255u8 {
            let printable = (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
            let c = if printable {
                char::from(b)
            } else {
                n += 1;
                char::from_u32(255 + n).unwrap()
            };
            assert!(alphabet.contains(&c));
            pairs.push((b, c));
        }
        let vocab: tokenizers::models::bpe::Vocab = pairs.iter().map(|(b, c)| (c.to_string(), u32::from(*b))).collect();
        let bpe = BPE::builder().vocab_and_merges(vocab, vec![]).build().unwrap();
        let mut t = Tokenizer::new(bpe);
        t.with_pre_tokenizer(Some(ByteLevel::new(false, false, false)));
        t.with_decoder(Some(ByteLevel::default()));
        t
    }

    fn feed(reply: &mut Reply<'_>, s: &str) -> Vec<Step> {
        s.bytes().map(|b| reply.push(u32::from(b)).unwrap()).collect()
    }

    #[test]
    fn a_character_is_sent_whole_once_its_bytes_are_in() {
        let t = bytes_tokenizer();
        let mut r = Reply::new(&t, vec![]);
        let steps = feed(&mut r, "hé");
        assert_eq!(steps, vec![Step::Piece("h".into()), Step::Piece(String::new()), Step::Piece("é".into())]);
        assert_eq!(r.text(), "hé");
    }

    #[test]
    fn a_stop_string_ends_the_reply_and_its_start_is_held_back() {
        let t = bytes_tokenizer();
        let mut r = Reply::new(&t, vec!["END".into()]);
        let steps = feed(&mut r, "abEND");
        assert_eq!(steps[1], Step::Piece("b".into()));
        assert_eq!(steps[2], Step::Piece(String::new()), "'E' may begin the stop string");
        assert_eq!(steps[4], Step::Stopped(String::new()));
        assert_eq!(r.text(), "ab");
        let mut r = Reply::new(&t, vec!["END".into()]);
        feed(&mut r, "aEN");
        assert_eq!(r.rest(), "EN", "what was held back goes out at the end");
    }
}
