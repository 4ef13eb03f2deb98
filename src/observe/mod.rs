//! What the server says about itself besides metrics: the log (`logging`) and request traces
//! (`trace`), with their Triton extensions. Both frontends hand their requests' settings to the
//! one parser here, so HTTP and gRPC accept and reject the same things with the same words.

pub mod logging;
pub mod trace;

/// One setting's value in a logging request, whichever protocol carried it.
#[derive(Debug, Clone, PartialEq)]
pub enum SettingValue {
    /// JSON `null` or a gRPC value with no field set: leave the setting as it is.
    Null,
    Bool(bool),
    UInt(u64),
    Str(String),
    /// Any other JSON value, named for the error message.
    Other(&'static str),
}

impl SettingValue {
    pub fn from_json(v: &serde_json::Value) -> Self {
        use serde_json::Value;
        match v {
            Value::Null => SettingValue::Null,
            Value::Bool(b) => SettingValue::Bool(*b),
            Value::Number(n) => match n.as_u64() {
                Some(u) => SettingValue::UInt(u),
                None if n.as_i64().is_some() => SettingValue::Other("a negative number"),
                None => SettingValue::Other("a fractional number"),
            },
            Value::String(s) => SettingValue::Str(s.clone()),
            Value::Array(_) => SettingValue::Other("an array"),
            Value::Object(_) => SettingValue::Other("an object"),
        }
    }

    /// How an error message names the value.
    pub fn describe(&self) -> String {
        match self {
            SettingValue::Null => "null".into(),
            SettingValue::Bool(b) => format!("boolean {b}"),
            SettingValue::UInt(n) => format!("integer {n}"),
            SettingValue::Str(s) => format!("string \"{s}\""),
            SettingValue::Other(what) => (*what).into(),
        }
    }
}
