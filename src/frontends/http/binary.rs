//! Triton's binary tensor data extension on the wire: the `Inference-Header-Content-Length`
//! header splits a body into the JSON header and the binary part; inputs with
//! `binary_data_size` take consecutive slices of that part (slices of the body's `Bytes`, never
//! copies); a response with binary outputs is the JSON followed by the outputs' raw bytes.

use actix_web::body::SizedStream;
use actix_web::http::header::HeaderValue;
use bytes::Bytes;
use futures::stream;
use tritium_actors::{Error, Result};

/// The request and response header that gives the JSON part's length.
pub const HEADER_LENGTH: &str = "Inference-Header-Content-Length";

/// Splits `body` into (JSON, binary). Without the header the whole body is JSON.
pub fn split_body(body: Bytes, header: Option<&HeaderValue>) -> Result<(Bytes, Bytes)> {
    let Some(value) = header else {
        return Ok((body, Bytes::new()));
    };
    let text = value.to_str().unwrap_or("");
    let len: usize = text.trim().parse().map_err(|_| {
        Error::invalid(format!("inference header size should be in range (0, {}), got: {text}", body.len()))
    })?;
    if len > body.len() {
        return Err(Error::invalid(format!(
            "inference header size should be in range (0, {}), got: {len}",
            body.len()
        )));
    }
    if len == 0 {
        return Err(Error::unsupported(format!(
            "a raw binary request ({HEADER_LENGTH}: 0) is not supported; send a JSON header"
        )));
    }
    let binary = body.slice(len..);
    let mut json = body;
    json.truncate(len);
    Ok((json, binary))
}

/// Hands out consecutive slices of the binary part to the inputs that ask for them.
#[derive(Debug)]
pub struct BinaryCursor {
    data: Bytes,
    pos: usize,
}

impl BinaryCursor {
    pub fn new(data: Bytes) -> Self {
        BinaryCursor { data, pos: 0 }
    }

    /// The next `size` bytes for input `input` of `model`, without copying.
    pub fn take(&mut self, size: u64, input: &str, model: &str) -> Result<Bytes> {
        let left = self.data.len() - self.pos;
        match usize::try_from(size) {
            Ok(n) if n <= left => {
                let out = self.data.slice(self.pos..self.pos + n);
                self.pos += n;
                Ok(out)
            }
            _ => Err(Error::invalid(format!(
                "unexpected size for input '{input}', expecting {} additional bytes for model '{model}'",
                size - left as u64
            ))),
        }
    }

    /// Fails when bytes are left that no input claimed.
    pub fn finish(&self, model: &str) -> Result<()> {
        if self.pos != self.data.len() {
            return Err(Error::invalid(format!("unexpected additional input data for model '{model}'")));
        }
        Ok(())
    }
}

/// A response body of the JSON header followed by the binary outputs, sent chunk by chunk so
/// the output `Bytes` are never copied; its length is known, so it goes with `Content-Length`.
pub fn body_with_binary(
    json: Vec<u8>,
    chunks: Vec<Bytes>,
) -> SizedStream<impl futures::Stream<Item = std::result::Result<Bytes, Error>>> {
    let total: usize = json.len() + chunks.iter().map(Bytes::len).sum::<usize>();
    let parts: Vec<std::result::Result<Bytes, Error>> =
        std::iter::once(Bytes::from(json)).chain(chunks).filter(|b| !b.is_empty()).map(Ok).collect();
    SizedStream::new(total as u64, stream::iter(parts))
}

#[cfg(test)]
mod tests {
    use actix_web::body::MessageBody;

    use super::*;

    fn hv(s: &str) -> HeaderValue {
        HeaderValue::from_str(s).unwrap()
    }

    #[test]
    fn splits_at_the_header_length_without_copying() {
        let body = Bytes::from_static(b"{\"a\":1}\x01\x02\x03");
        let (json, bin) = split_body(body.clone(), Some(&hv("7"))).unwrap();
        assert_eq!(&json[..], b"{\"a\":1}");
        assert_eq!(&bin[..], b"\x01\x02\x03");
        assert_eq!(bin.as_ptr(), body[7..].as_ptr());
    }

    #[test]
    fn without_header_the_whole_body_is_json() {
        let (json, bin) = split_body(Bytes::from_static(b"{}"), None).unwrap();
        assert_eq!(&json[..], b"{}");
        assert!(bin.is_empty());
    }

    #[test]
    fn refuses_header_longer_than_body_or_unparsable() {
        let e = split_body(Bytes::from_static(b"{}"), Some(&hv("3"))).unwrap_err();
        assert!(e.message.contains("inference header size should be in range (0, 2), got: 3"), "{e}");
        assert!(split_body(Bytes::from_static(b"{}"), Some(&hv("-1"))).is_err());
        assert!(split_body(Bytes::from_static(b"{}"), Some(&hv("abc"))).is_err());
        let e = split_body(Bytes::from_static(b"{}"), Some(&hv("0"))).unwrap_err();
        assert_eq!(e.kind, tritium_actors::ErrorKind::Unsupported);
    }

    #[test]
    fn cursor_slices_consecutively_and_checks_the_rest() {
        let data = Bytes::from_static(b"aabbbc");
        let mut c = BinaryCursor::new(data.clone());
        assert_eq!(&c.take(2, "A", "m").unwrap()[..], b"aa");
        let b = c.take(3, "B", "m").unwrap();
        assert_eq!(&b[..], b"bbb");
        assert_eq!(b.as_ptr(), data[2..].as_ptr());
        let e = c.finish("m").unwrap_err();
        assert!(e.message.contains("unexpected additional input data for model 'm'"), "{e}");
        let e = c.take(4, "C", "m").unwrap_err();
        assert!(e.message.contains("unexpected size for input 'C', expecting 3 additional bytes"), "{e}");
        let e = c.take(u64::MAX, "C", "m").unwrap_err();
        assert!(e.message.contains("input 'C'"), "{e}");
        c.take(1, "C", "m").unwrap();
        c.finish("m").unwrap();
    }

    #[actix_rt::test]
    async fn binary_body_is_json_then_chunks() {
        let body =
            body_with_binary(b"{}".to_vec(), vec![Bytes::from_static(b"xy"), Bytes::new(), Bytes::from_static(b"z")]);
        assert_eq!(body.size(), actix_web::body::BodySize::Sized(5));
        let bytes = actix_web::body::to_bytes(body).await.ok().unwrap();
        assert_eq!(&bytes[..], b"{}xyz");
    }
}
