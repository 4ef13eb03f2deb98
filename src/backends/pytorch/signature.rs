//! The argument names of a TorchScript module's `forward`, read from the archive itself, so
//! that inputs may be named after them as Triton's PyTorch backend allows (libtorch knows the
//! schema, but `tch` does not expose it). A TorchScript `model.pt` is a zip archive: its
//! `data.pkl` names the root module's class (`__torch__.<path>.<Class>`), and the class's
//! TorchScript source lives in `code/__torch__[/<path>].py`. Anything unexpected yields `None`
//! and the caller falls back to the `<name>__<index>` convention.

use std::io::Read;
use std::path::Path;

/// `forward`'s arguments after `self`, in order; `None` when the archive does not say.
pub fn forward_arguments(model_file: &Path) -> Option<Vec<String>> {
    let file = std::fs::File::open(model_file).ok()?;
    let mut archive = zip::ZipArchive::new(file).ok()?;
    let names: Vec<String> = archive.file_names().map(str::to_string).collect();
    let data = names.iter().find(|n| n.ends_with("/data.pkl") && n.matches('/').count() == 1)?;
    let root = data.trim_end_matches("data.pkl");
    let (module, class) = root_class(&read(&mut archive, data)?)?;
    // `__torch__` -> code/__torch__.py; `__torch__.a.b` -> code/__torch__/a/b.py.
    let code = format!("{root}code/{}.py", module.replace('.', "/"));
    let source = String::from_utf8(read(&mut archive, &code)?).ok()?;
    forward_in_class(&source, &class)
}

fn read<R: std::io::Read + std::io::Seek>(archive: &mut zip::ZipArchive<R>, name: &str) -> Option<Vec<u8>> {
    let mut entry = archive.by_name(name).ok()?;
    let mut bytes = Vec::new();
    entry.read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// The module and class of the pickle's first GLOBAL opcode (`c<module>\n<name>\n`), which is
/// the root object's class in a TorchScript `data.pkl` (protocol 2).
fn root_class(pickle: &[u8]) -> Option<(String, String)> {
    let start = pickle.iter().position(|&b| b == b'c')? + 1;
    let mut lines = pickle[start..].splitn(3, |&b| b == b'\n');
    let module = std::str::from_utf8(lines.next()?).ok()?;
    let class = std::str::from_utf8(lines.next()?).ok()?;
    if !module.starts_with("__torch__") || class.is_empty() {
        return None;
    }
    Some((module.to_string(), class.to_string()))
}

/// The arguments of `def forward(self, ...)` inside `class <class>(...)` of TorchScript source.
fn forward_in_class(source: &str, class: &str) -> Option<Vec<String>> {
    let header = format!("class {class}(");
    let body_start = source.find(&header)?;
    let body = &source[body_start + header.len()..];
    let body = match body.find("\nclass ") {
        Some(end) => &body[..end],
        None => body,
    };
    let def = body.find("def forward(")? + "def forward(".len();
    // The parameter list ends at the parenthesis that closes `forward(`.
    let mut depth = 0usize;
    let mut params = Vec::new();
    let mut current = String::new();
    for ch in body[def..].chars() {
        match ch {
            '(' | '[' => depth += 1,
            ')' if depth == 0 => {
                params.push(std::mem::take(&mut current));
                break;
            }
            ')' | ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                params.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(ch);
    }
    let names: Vec<String> = params
        .iter()
        .map(|p| p.split(':').next().unwrap_or("").split('=').next().unwrap_or("").trim().to_string())
        .filter(|n| !n.is_empty())
        .collect();
    match names.split_first() {
        Some((first, rest)) if first == "self" => Some(rest.to_vec()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    const SOURCE: &str =
        "class Helper(Module):\n  def forward(self: __torch__.Helper,\n    z: Tensor) -> Tensor:\n    \
                          return z\nclass Net(Module):\n  __parameters__ = []\n  def forward(self: __torch__.Net,\n    \
                          INPUT: Tensor,\n    pairs: Tuple[Tensor, Tensor],\n    TEXT: List[str]) -> Tuple[Tensor, \
                          Tensor]:\n    return (INPUT, INPUT)\n";

    #[test]
    fn reads_the_arguments_of_the_named_class_only() {
        assert_eq!(forward_in_class(SOURCE, "Net").unwrap(), ["INPUT", "pairs", "TEXT"]);
        assert_eq!(forward_in_class(SOURCE, "Helper").unwrap(), ["z"]);
        assert_eq!(forward_in_class(SOURCE, "Missing"), None);
    }

    #[test]
    fn reads_the_root_class_from_data_pkl() {
        let pickle = b"\x80\x02c__torch__.models.text\nNet\nq\x00)\x81}(ubq\x01.";
        assert_eq!(root_class(pickle).unwrap(), ("__torch__.models.text".to_string(), "Net".to_string()));
        assert_eq!(root_class(b"\x80\x02cbuiltins\nobject\n."), None);
    }

    #[test]
    fn reads_a_whole_archive_and_gives_up_on_other_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.pt");
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
        let options = zip::write::FileOptions::default().compression_method(zip::CompressionMethod::Stored);
        zip.start_file("net/data.pkl", options).unwrap();
        zip.write_all(b"\x80\x02c__torch__\nNet\nq\x00)\x81}(ubq\x01.").unwrap();
        zip.start_file("net/code/__torch__.py", options).unwrap();
        zip.write_all(SOURCE.as_bytes()).unwrap();
        zip.finish().unwrap();
        assert_eq!(forward_arguments(&path).unwrap(), ["INPUT", "pairs", "TEXT"]);

        let not_zip = dir.path().join("plain.pt");
        std::fs::write(&not_zip, b"not a TorchScript archive").unwrap();
        assert_eq!(forward_arguments(&not_zip), None);
    }
}
