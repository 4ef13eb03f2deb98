//! The one middleware around the main HTTP app, run before actix's router: Triton's restricted
//! APIs (a request of a restricted category without its header is refused before routing), then
//! the infer paths matched by their segments and handed to `infer` directly.
//!
//! Why the infer paths skip the router: actix tries its resources in order, and each pattern with
//! a `{segment}` is a regex match (`regex_lite`'s PikeVM), about 3 µs of a lone add_sub request's
//! 77 µs of CPU in the profile of 2026-12-05; the extractors (`Data`, `Path`, `Payload`) add their
//! own futures. A POST to `/v2/models/{m}/infer` or `/v2/models/{m}/versions/{v}/infer` whose
//! segments are plain (non-empty, no percent-escape, which the router would decode) is served
//! here; any other request, those with escapes included, goes to the router as before, whose
//! routes (the same two infer paths among them) are unchanged.

use actix_web::body::{BoxBody, EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::{header, Method, StatusCode};
use actix_web::middleware::Next;
use actix_web::{web, FromRequest as _, HttpResponse};

use super::{infer, HttpState};
use crate::frontends::restricted::{self, Restrictions};

/// The model's and version's segments of an infer path that needs no decoding (see the module's
/// doc), or `None`.
pub fn infer_path(path: &str) -> Option<(&str, Option<&str>)> {
    let rest = path.strip_prefix("/v2/models/")?.strip_suffix("/infer")?;
    let (model, version) = match rest.split_once('/') {
        None => (rest, None),
        Some((model, tail)) => (model, Some(tail.strip_prefix("versions/")?)),
    };
    let plain = |s: &str| !s.is_empty() && !s.contains(['/', '%']);
    (plain(model) && version.is_none_or(plain)).then_some((model, version))
}

/// Triton's restricted APIs, then the infer fast path, then actix's router (`next`).
pub async fn front_door(
    restrictions: web::Data<Restrictions>,
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody, BoxBody>>, actix_web::Error> {
    if !restrictions.is_empty() {
        let category = restricted::http_category(req.path());
        if let Some(r) = restrictions.refuses(category, |key| req.headers().get(key).map(|v| v.as_bytes())) {
            // The body is Triton's JSON error; the content type is Triton's too (`text/plain`:
            // Triton answers before it sets one).
            let body = serde_json::json!({ "error": restricted::http_message(r) }).to_string();
            let refusal = HttpResponse::build(StatusCode::FORBIDDEN)
                .insert_header((header::CONTENT_TYPE, "text/plain"))
                .body(body);
            return Ok(req.into_response(refusal).map_into_right_body());
        }
    }
    if req.method() == Method::POST {
        if let Some((model, version)) = infer_path(req.path()) {
            let model = model.to_string();
            let version = version.map(str::to_string);
            let state = req.app_data::<web::Data<HttpState>>().expect("the main app registers its HttpState").clone();
            let (http_req, mut payload) = req.into_parts();
            // Ready at once: it only takes the payload stream.
            let payload = web::Payload::from_request(&http_req, &mut payload).into_inner()?;
            let response = match infer::infer_at(&state, &model, version.as_deref(), &http_req, payload).await {
                Ok(response) => response,
                Err(e) => HttpResponse::from_error(e),
            };
            return Ok(ServiceResponse::new(http_req, response).map_into_right_body());
        }
    }
    Ok(next.call(req).await?.map_into_left_body())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_two_infer_paths_with_plain_segments() {
        assert_eq!(infer_path("/v2/models/add_sub/infer"), Some(("add_sub", None)));
        assert_eq!(infer_path("/v2/models/a.b-c/versions/3/infer"), Some(("a.b-c", Some("3"))));
        // A version that is not a number is the handler's 404, as through the router.
        assert_eq!(infer_path("/v2/models/m/versions/x/infer"), Some(("m", Some("x"))));
        assert_eq!(infer_path("/v2/models/versions/infer"), Some(("versions", None)));
    }

    #[test]
    fn leaves_everything_else_to_the_router() {
        for path in [
            "/v2/models/infer",
            "/v2/models//infer",
            "/v2/models/m/infer/",
            "/v2/models/m/ready",
            "/v2/models/m%20x/infer",
            "/v2/models/m/versions/%31/infer",
            "/v2/models/m/versions//infer",
            "/v2/models/m/versions/infer",
            "/v2/models/m/x/infer",
            "/v2/models/m/versions/1/2/infer",
            "/v2/models/m/generate",
            "/v1/models/m/infer",
        ] {
            assert_eq!(infer_path(path), None, "{path}");
        }
    }
}
