//! `config.pbtxt`: protobuf text format parsed through the `ModelConfig` descriptor, with
//! errors that point at `file:line:column` and name the field or token at fault.

use std::path::Path;

use miette::Diagnostic as _;
use prost::Message as _;
use prost_reflect::text_format::ParseError;
use prost_reflect::DynamicMessage;
use tritium_actors::{Error, Result};

use super::ModelConfig;
use crate::proto::message_descriptor;

/// Parses a `config.pbtxt`. `file` only names the source in error messages.
pub fn parse_pbtxt(text: &str, file: &Path) -> Result<ModelConfig> {
    let desc = message_descriptor("inference.ModelConfig");
    let (normalized, inserted) = add_list_colons(text);
    let message = DynamicMessage::parse_text_format(desc, &normalized)
        .map_err(|e| parse_error(&normalized, file, &e, &inserted))?;
    ModelConfig::decode(message.encode_to_vec().as_slice())
        .map_err(|e| Error::internal(format!("{}: re-decoding the parsed configuration failed: {e}", file.display())))
}

/// Protobuf text format lets a repeated message field omit the colon before its list
/// (`input [ { .. } ]`, the form Triton's documentation uses), which prost-reflect does not
/// accept; this inserts the colon. Returns the text and where (in original byte offsets) each
/// colon went, so error positions can be mapped back.
fn add_list_colons(text: &str) -> (String, Vec<usize>) {
    let mut out = String::with_capacity(text.len() + 16);
    let mut inserted = Vec::new();
    // End (original offset) of the last identifier, if nothing significant came after it.
    let mut after_ident: Option<usize> = None;
    let mut chars = text.char_indices().peekable();
    let mut copied = 0;
    while let Some((i, c)) = chars.next() {
        match c {
            '#' => {
                while let Some(&(_, c)) = chars.peek() {
                    if c == '\n' {
                        break;
                    }
                    chars.next();
                }
            }
            '"' | '\'' => {
                after_ident = None;
                let quote = c;
                while let Some((_, c)) = chars.next() {
                    if c == '\\' {
                        chars.next();
                    } else if c == quote || c == '\n' {
                        break;
                    }
                }
            }
            c if c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-' || c == '+' => {
                let mut end = i + c.len_utf8();
                while let Some(&(j, c)) = chars.peek() {
                    if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
                        end = j + c.len_utf8();
                        chars.next();
                    } else {
                        break;
                    }
                }
                let word = &text[i..end];
                let is_ident = word.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
                after_ident = is_ident.then_some(end);
            }
            '[' => {
                if let Some(end) = after_ident.take() {
                    out.push_str(&text[copied..end]);
                    out.push(':');
                    copied = end;
                    inserted.push(end);
                }
            }
            c if c.is_whitespace() => {}
            _ => after_ident = None,
        }
    }
    out.push_str(&text[copied..]);
    (out, inserted)
}

/// Maps an offset in the normalized text back to the original text.
fn original_offset(offset: usize, inserted: &[usize]) -> usize {
    let mut offset = offset;
    for (n, at) in inserted.iter().enumerate() {
        // The n-th colon sits at `at + n` in the normalized text.
        if at + n < offset {
            offset -= 1;
        } else {
            break;
        }
    }
    offset
}

fn parse_error(normalized: &str, file: &Path, error: &ParseError, inserted: &[usize]) -> Error {
    let text = &remove_inserted(normalized, inserted);
    let span =
        error.labels().and_then(|mut labels| labels.next()).map(|l| (original_offset(l.offset(), inserted), l.len()));
    let mut message = error.to_string();
    let offset = match span {
        Some((offset, len)) => {
            let token = text.get(offset..offset + len).unwrap_or("");
            if !token.is_empty() && !message.contains(token) {
                message = format!("{message} (at '{token}')");
            }
            if let Some(field) = field_of_value(text, offset) {
                message = format!("field '{field}': {message}");
            }
            offset
        }
        // Only "reached end of input" has no span; the useful place is the unclosed bracket.
        None => match unclosed_bracket(text) {
            Some((at, bracket)) => {
                let (line, col) = line_col(text, at);
                message = format!("{message} ('{bracket}' opened at {line}:{col} is never closed)");
                text.len()
            }
            None => text.len(),
        },
    };
    let (line, col) = line_col(text, offset);
    Error::invalid(format!("{}:{line}:{col}: {message}", file.display()))
}

fn remove_inserted(normalized: &str, inserted: &[usize]) -> String {
    let mut text = normalized.to_string();
    for (n, at) in inserted.iter().enumerate().rev() {
        text.remove(at + n);
    }
    text
}

/// 1-based line and column (in characters) of a byte offset. The parser's offsets may fall
/// inside a multi-byte character of malformed input; they count from that character's start.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let head = &text[..offset];
    let line = head.matches('\n').count() + 1;
    let line_start = head.rfind('\n').map_or(0, |i| i + 1);
    (line, head[line_start..].chars().count() + 1)
}

/// The field whose value starts at `offset` (`name: <value>` or `name: [ .., <value> ]`),
/// so a wrong-typed value is reported with its field's name.
fn field_of_value(text: &str, offset: usize) -> Option<&str> {
    let mut head = text.get(..offset)?.trim_end();
    if head.ends_with('[') || head.ends_with(',') {
        head = head[..head.rfind('[')?].trim_end();
    }
    let head = head.strip_suffix(':')?.trim_end();
    // Past the last character that is not part of a name (it may be several bytes long).
    let start = head
        .char_indices()
        .rev()
        .find(|&(_, c)| !(c.is_ascii_alphanumeric() || c == '_'))
        .map_or(0, |(i, c)| i + c.len_utf8());
    let name = &head[start..];
    (!name.is_empty()).then_some(name)
}

/// The innermost `{`, `[` or `<` left open at the end of `text`, skipping strings and `#`
/// comments.
fn unclosed_bracket(text: &str) -> Option<(usize, char)> {
    let mut open = Vec::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '#' => {
                for (_, c) in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            '"' | '\'' => {
                let quote = c;
                while let Some((_, c)) = chars.next() {
                    if c == '\\' {
                        chars.next();
                    } else if c == quote || c == '\n' {
                        break;
                    }
                }
            }
            '{' | '[' | '<' => open.push((i, c)),
            '}' | ']' | '>' => {
                open.pop();
            }
            _ => {}
        }
    }
    open.pop()
}

#[cfg(test)]
mod tests {
    use tritium_actors::ErrorKind;

    use super::*;
    use crate::proto::inference::model_config::SchedulingChoice;
    use crate::proto::inference::model_instance_group::Kind;

    fn parse(text: &str) -> Result<ModelConfig> {
        parse_pbtxt(text, Path::new("model_repository/foo/config.pbtxt"))
    }

    #[test]
    fn parses_a_documentation_style_config() {
        let config = parse(
            r#"
# The add_sub example, in the style of Triton's docs.
name: "add_sub"
backend: "onnxruntime"
max_batch_size: 8
input [
  {
    name: "INPUT0"
    data_type: TYPE_FP32
    dims: [ 16 ]
  },
  {
    name: "INPUT1"
    data_type: TYPE_FP32
    dims: [ 4, -1 ]
    reshape: { shape: [ -1, 4 ] }
    allow_ragged_batch: true
  }
]
output {
  name: "OUTPUT0"   # trailing comment
  data_type: TYPE_STRING
  dims: 16
  label_filename: "labels.txt"
}
output { name: "OUTPUT1" data_type: TYPE_INT64 dims: [ 1 ] }
instance_group [ { count: 2 kind: KIND_CPU } ]
version_policy: { specific: { versions: [1, 3] } }
parameters { key: "note" value: { string_value: "tab\there \"quoted\"" } }
parameters: [ { key: "k2", value { string_value: 'single' } } ]
"#,
        )
        .unwrap();
        assert_eq!(config.name, "add_sub");
        assert_eq!(config.max_batch_size, 8);
        assert_eq!(config.input.len(), 2);
        assert_eq!(config.input[1].dims, vec![4, -1]);
        assert_eq!(config.input[1].reshape.as_ref().unwrap().shape, vec![-1, 4]);
        assert!(config.input[1].allow_ragged_batch);
        assert_eq!(config.output.len(), 2);
        assert_eq!(config.output[0].data_type, ProtoDataType::TypeString as i32);
        assert_eq!(config.output[0].dims, vec![16]);
        assert_eq!(config.instance_group[0].kind, Kind::Cpu as i32);
        assert_eq!(config.instance_group[0].count, 2);
        assert_eq!(config.parameters["note"].string_value, "tab\there \"quoted\"");
        assert_eq!(config.parameters["k2"].string_value, "single");
        assert!(config.version_policy.is_some());
    }

    use super::super::ProtoDataType;

    #[test]
    fn parses_dynamic_batching_with_priority_queue_policy_map() {
        let config = parse(
            r#"
max_batch_size: 16
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 100
  priority_levels: 2
  default_priority_level: 2
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 5000 }
  priority_queue_policy { key: 1 value: { max_queue_size: 10 allow_timeout_override: true } }
}
model_transaction_policy { decoupled: true }
"#,
        )
        .unwrap();
        let Some(SchedulingChoice::DynamicBatching(db)) = config.scheduling_choice else {
            panic!("dynamic_batching expected")
        };
        assert_eq!(db.preferred_batch_size, vec![4, 8]);
        assert_eq!(db.default_queue_policy.unwrap().default_timeout_microseconds, 5000);
        assert_eq!(db.priority_queue_policy[&1].max_queue_size, 10);
        assert!(config.model_transaction_policy.unwrap().decoupled);
    }

    #[test]
    fn unknown_field_names_file_line_column_and_field() {
        let err =
            parse("name: \"foo\"\nmax_batch_size: 4\ninput {\n  name: \"x\"\n}\n\n  max_batchsize: 8\n").unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidArgument);
        assert!(err.message.starts_with("model_repository/foo/config.pbtxt:7:3: "), "{}", err.message);
        assert!(err.message.contains("max_batchsize"), "{}", err.message);
        assert!(err.message.contains("inference.ModelConfig"), "{}", err.message);
    }

    #[test]
    fn an_offset_inside_a_multibyte_character_counts_from_its_start() {
        // The parser reported such an offset for `state [€` (fuzz/regressions/model_config).
        assert_eq!(line_col("a\nb [\u{20ac}", 6), (2, 4));
        assert_eq!(line_col("a\nb [\u{20ac}", 7), (2, 4));
        assert_eq!(line_col("a\nb [\u{20ac}", 99), (2, 5));
    }

    #[test]
    fn wrong_value_type_names_the_field() {
        let err = parse("name: \"foo\"\nmax_batch_size: \"eight\"\n").unwrap_err();
        assert!(err.message.starts_with("model_repository/foo/config.pbtxt:2:17: "), "{}", err.message);
        assert!(err.message.contains("field 'max_batch_size'"), "{}", err.message);
        let err = parse("input { dims: [ 1, x ] }").unwrap_err();
        assert!(err.message.contains(":1:20: field 'dims'"), "{}", err.message);
    }

    #[test]
    fn unknown_enum_value_is_reported_with_its_field() {
        let err = parse("input {\n  name: \"x\"\n  data_type: TYPE_FLOAT32\n}").unwrap_err();
        assert!(err.message.contains(":3:14: field 'data_type'"), "{}", err.message);
        assert!(err.message.contains("TYPE_FLOAT32"), "{}", err.message);
    }

    #[test]
    fn unterminated_brace_points_at_the_opening_brace() {
        let err = parse("name: \"foo\"\ninput [\n  {\n    name: \"x\"\n").unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidArgument);
        assert!(err.message.contains("config.pbtxt:5:1: "), "{}", err.message);
        assert!(err.message.contains("opened at 3:3"), "{}", err.message);
    }

    #[test]
    fn list_colon_insertion_keeps_error_positions() {
        let (text, inserted) = add_list_colons("input [ { name: \"a[\" } ]\noutput: [ ]\n# x [\n");
        assert_eq!(text, "input: [ { name: \"a[\" } ]\noutput: [ ]\n# x [\n");
        assert_eq!(inserted, vec![5]);
        let err = parse("input [ { name: \"a\" } ]\ninput [ { nme: \"b\" } ]").unwrap_err();
        assert!(err.message.contains("config.pbtxt:2:11: "), "{}", err.message);
    }

    #[test]
    fn empty_file_is_an_empty_config() {
        assert_eq!(parse("# nothing here\n").unwrap(), ModelConfig::default());
    }
}
