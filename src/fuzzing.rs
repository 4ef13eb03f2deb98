//! What the fuzz targets (`fuzz/fuzz_targets/`) and the corpus replay (`tests/fuzz_corpus.rs`)
//! run on arbitrary bytes: the same calls the server makes on a request body or a config file,
//! with the rule that any input may be refused with an error but none may panic, hang or
//! allocate for a size it only claims.

use std::path::Path;

use actix_web::http::header::HeaderValue;
use bytes::Bytes;

use crate::config;
use crate::frontends::http::binary::split_body;
use crate::frontends::http::infer_json::{decode_infer, decode_value};

/// An HTTP infer body: the first line of `data` is the `Inference-Header-Content-Length`
/// header's value (none when the line is empty or there is no newline), the rest is the body,
/// decoded as `POST /v2/models/m/infer` decodes it. True when the request was accepted.
///
/// The server reads a header the typed way first and falls back to a `serde_json::Value` tree;
/// both readings must give the same request (or the same error) for every input.
pub fn infer_body(data: &[u8]) -> bool {
    let (header, body) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&[][..], data),
    };
    let header = if header.is_empty() { None } else { HeaderValue::from_bytes(header).ok() };
    let Ok((json, binary)) = split_body(Bytes::copy_from_slice(body), header.as_ref()) else { return false };
    let decoded = decode_infer("m", None, &json, binary.clone());
    let by_value = decode_value("m", None, &json, binary);
    match (&decoded, &by_value) {
        (Ok((a, plan_a)), Ok((b, plan_b))) => {
            assert_eq!(request_parts(a), request_parts(b), "the typed and the Value readings disagree");
            assert_eq!(plan_a, plan_b, "the typed and the Value readings plan the outputs differently");
        }
        (Err(a), Err(b)) => assert_eq!(a.message, b.message),
        _ => panic!("one reading accepted what the other refused"),
    }
    decoded.is_ok()
}

/// What a decoded request is made of (the parts a frontend sets).
fn request_parts(r: &tritium_actors::InferRequest) -> String {
    format!(
        "{:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?}",
        r.id, r.model, r.version, r.inputs, r.outputs, r.parameters, r.sequence, r.priority, r.timeout_us
    )
}

/// A `config.pbtxt`: parsed, completed and checked as a load does, then turned into the
/// engine's policy. True when the config was accepted.
pub fn model_config(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else { return false };
    let Ok(mut config) = config::parse_pbtxt(text, Path::new("fuzz/config.pbtxt")) else { return false };
    config::normalize(&mut config, 0);
    if config::validate(&config).is_err() {
        return false;
    }
    let _ = config::to_json(&config);
    config::to_policy(&config, 1, None).is_ok()
}

/// A gRPC `ModelInferRequest` message, decoded as the gRPC frontend decodes it, then each BYTES
/// input's elements walked as a backend would. True when the request was accepted.
pub fn grpc_infer(data: &[u8]) -> bool {
    use prost::Message as _;
    let Ok(req) = crate::proto::inference::ModelInferRequest::decode(data) else { return false };
    let Ok(decoded) = crate::frontends::grpc::decode::decode(req) else { return false };
    decoded.request.inputs.iter().all(|t| {
        if t.datatype != tritium_actors::DataType::Bytes {
            return true;
        }
        let count = t.shape.iter().try_fold(1usize, |n, &d| usize::try_from(d).ok().and_then(|d| n.checked_mul(d)));
        count.is_some_and(|n| tritium_actors::tensor::bytes_element_ranges(&t.data, n).is_ok())
    })
}

/// Triton's serialized BYTES tensor: the first two bytes are the element count the shape
/// claims (little-endian), the rest the length-prefixed elements. When the elements are
/// accepted, serializing them again must give back exactly the bytes read. True when accepted.
pub fn bytes_elements(data: &[u8]) -> bool {
    if data.len() < 2 {
        return false;
    }
    let expected = u16::from_le_bytes([data[0], data[1]]) as usize;
    let payload = &data[2..];
    let Ok(ranges) = tritium_actors::tensor::bytes_element_ranges(payload, expected) else { return false };
    let again = tritium_actors::tensor::serialize_bytes(ranges.iter().map(|&(a, b)| &payload[a..b]));
    assert_eq!(&again[..], payload, "BYTES elements do not serialize back to what was read");
    true
}

/// The size of the object behind the shared-memory target's region.
const SHM_OBJECT_BYTES: u64 = 4096;

/// Shared-memory parameters as a request or a register call carries them, against one real
/// region (a 4 KiB POSIX object registered from offset 512, made once per process). `data`:
/// an operation byte, then offset and byte size (two little-endian u64), then the bytes to
/// write. Any access is either refused or stays inside the region; none may fault. True when
/// the operation was accepted.
pub fn shm_params(data: &[u8]) -> bool {
    use std::sync::OnceLock;
    static REGION: OnceLock<(crate::shm::Registry, String)> = OnceLock::new();
    let (registry, key) = REGION.get_or_init(|| {
        let key = format!("/tritium-fuzz-{}", std::process::id());
        let file = std::fs::File::create(format!("/dev/shm{key}")).expect("make the fuzz region's object");
        file.set_len(SHM_OBJECT_BYTES).expect("size the fuzz region's object");
        let registry = crate::shm::Registry::default();
        registry.register("r", &key, 512, SHM_OBJECT_BYTES - 512).expect("register the fuzz region");
        (registry, key)
    });
    if data.len() < 17 {
        return false;
    }
    let word = |i: usize| u64::from_le_bytes(data[i..i + 8].try_into().expect("8 bytes"));
    let (op, offset, size, payload) = (data[0] % 4, word(1), word(9), &data[17..]);
    let region_bytes = SHM_OBJECT_BYTES - 512;
    match op {
        0 => match registry.read("r", offset, size) {
            Ok(bytes) => {
                assert!(offset + size <= region_bytes && bytes.len() as u64 == size, "a read left the region");
                true
            }
            Err(_) => false,
        },
        1 => registry.write("r", offset, size, payload, "OUT").is_ok(),
        2 => registry.check_output("r", offset, size).is_ok(),
        _ => {
            // Registering another view of the same object: accepted only inside the object.
            let accepted = registry.register("view", key, offset, size).is_ok();
            if accepted {
                assert!(size > 0 && offset.checked_add(size).is_some_and(|end| end <= SHM_OBJECT_BYTES));
                registry.unregister("view");
            }
            accepted
        }
    }
}
