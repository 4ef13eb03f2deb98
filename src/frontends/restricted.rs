//! Triton's restricted API categories (`--http-restricted-api`, `--grpc-restricted-protocol`):
//! a category named in a flag answers only requests that carry the flag's header (HTTP) or
//! metadata entry (gRPC) with the flag's value. The flag's syntax, its errors, the categories of
//! every HTTP path and gRPC method, and the refusal texts are Triton 2.51's
//! (`command_line_parser.cc` `ParseRestrictedFeatureOption`, `restricted_features.h`,
//! `http_server.cc` `RespondIfRestricted`, `grpc_server.cc` `ExecutePrecondition`); checked
//! against the real server.
//!
//! A gRPC restriction's key is prefixed with `triton-grpc-protocol-` as Triton does: the flag
//! `inference:key=v` wants the metadata `triton-grpc-protocol-key: v`. Header names match
//! without regard to case (HTTP header names are case-insensitive; gRPC metadata keys are lower
//! case on the wire); values match exactly.
//!
//! Tritium adds one category of its own, `actors`: its live actor tree and page on the metrics
//! port (`/v2/actors…`, `/actors…`, which `metrics::actors` guards with it; the HTTP port
//! does not serve them). It is HTTP only: the gRPC flag refuses it.

use std::sync::LazyLock;

use regex::Regex;

/// Triton's categories, in Triton's order, then Tritium's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    Health,
    Metadata,
    Inference,
    SharedMemory,
    ModelConfig,
    ModelRepository,
    Statistics,
    Trace,
    Logging,
    /// Tritium's: the actor tree and page on the metrics port.
    Actors,
}

impl Category {
    pub const ALL: [Category; 10] = [
        Category::Health,
        Category::Metadata,
        Category::Inference,
        Category::SharedMemory,
        Category::ModelConfig,
        Category::ModelRepository,
        Category::Statistics,
        Category::Trace,
        Category::Logging,
        Category::Actors,
    ];

    /// The name the flags use.
    pub fn name(self) -> &'static str {
        match self {
            Category::Health => "health",
            Category::Metadata => "metadata",
            Category::Inference => "inference",
            Category::SharedMemory => "shared-memory",
            Category::ModelConfig => "model-config",
            Category::ModelRepository => "model-repository",
            Category::Statistics => "statistics",
            Category::Trace => "trace",
            Category::Logging => "logging",
            Category::Actors => "actors",
        }
    }

    fn from_name(name: &str) -> Option<Category> {
        Category::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// The header (or metadata key) and the value a restricted category wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restriction {
    pub key: String,
    pub value: String,
}

impl Restriction {
    /// Whether a request whose header `self.key` has `found` may pass.
    pub fn allows(&self, found: Option<&[u8]>) -> bool {
        found == Some(self.value.as_bytes())
    }
}

/// Which categories are restricted, and how. Empty (nothing restricted) by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restrictions([Option<Restriction>; 10]);

/// The prefix Triton puts before a gRPC restriction's key (`kRestrictedProtocolHeaderTemplate`).
pub const GRPC_KEY_PREFIX: &str = "triton-grpc-protocol-";

impl Restrictions {
    /// `--http-restricted-api` values: `<category>[,<category>…]:<header>=<value>`, one group
    /// per flag; a category may be in one group only.
    pub fn http(flags: &[String]) -> Result<Restrictions, String> {
        Restrictions::parse(flags, "http-restricted-api", "", "api")
    }

    /// `--grpc-restricted-protocol` values, the same syntax; the key gets Triton's prefix.
    pub fn grpc(flags: &[String]) -> Result<Restrictions, String> {
        Restrictions::parse(flags, "grpc-restricted-protocol", GRPC_KEY_PREFIX, "protocol")
    }

    fn parse(flags: &[String], option: &str, key_prefix: &str, feature: &str) -> Result<Restrictions, String> {
        let mut out = Restrictions::default();
        for arg in flags {
            let (names, key, value) = split_group(arg, option)?;
            for name in names.split(',') {
                let category =
                    Category::from_name(name).ok_or_else(|| format!("unknown restricted {feature} '{name}'"))?;
                if category == Category::Actors && !key_prefix.is_empty() {
                    return Err(format!(
                        "restricted {feature} 'actors' is the actor page on the metrics port, served over HTTP only: \
                         restrict it with --http-restricted-api"
                    ));
                }
                let slot = &mut out.0[category as usize];
                if slot.is_some() {
                    return Err(format!(
                        "restricted {feature} '{name}' can not be specified in multiple config groups"
                    ));
                }
                *slot = Some(Restriction { key: format!("{key_prefix}{key}"), value: value.to_string() });
            }
        }
        Ok(out)
    }

    pub fn get(&self, category: Category) -> Option<&Restriction> {
        self.0[category as usize].as_ref()
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(Option::is_none)
    }

    /// The restriction a request of `category` fails, given a lookup of its headers; `None`
    /// when it may pass.
    pub fn refuses<'h>(
        &self,
        category: Option<Category>,
        header: impl FnOnce(&str) -> Option<&'h [u8]>,
    ) -> Option<&Restriction> {
        let restriction = self.get(category?)?;
        (!restriction.allows(header(&restriction.key))).then_some(restriction)
    }
}

/// Triton's `ParseGenericConfigOption(arg, ":", "=")`: the first `:` ends the names, the first
/// `=` after it ends the key; none of the three may be empty.
fn split_group<'a>(arg: &'a str, option: &str) -> Result<(&'a str, &'a str, &'a str), String> {
    let bad = || format!("--{option} option format is '<config name>:<setting>=<value>'. Got {arg}");
    let (names, rest) = arg.split_once(':').ok_or_else(bad)?;
    let (key, value) = rest.split_once('=').ok_or_else(bad)?;
    if names.is_empty() || key.is_empty() || value.is_empty() {
        return Err(bad());
    }
    Ok((names, key, value))
}

/// The body of an HTTP refusal (Triton answers 403 with it).
pub fn http_message(r: &Restriction) -> String {
    format!("This API is restricted, expecting header '{}'", r.key)
}

/// The message of a gRPC refusal (Triton answers UNAVAILABLE with it).
pub fn grpc_message(r: &Restriction) -> String {
    format!("This protocol is restricted, expecting header '{}'", r.key)
}

static MODEL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^/v2/models/([^/]+)(?:/versions/([0-9]+))?(?:/(infer|generate|generate_stream|ready|config|stats|trace/setting))?$")
        .expect("model path pattern")
});
static SERVER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^/v2(?:/health/(live|ready))?$").expect("health path pattern"));
static SHARED_MEMORY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^/v2/(?:system|cuda)sharedmemory(?:/region/([^/]+))?/(status|register|unregister)$")
        .expect("shared-memory path pattern")
});
static REPOSITORY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^/v2/repository(?:/([^/]+))?/(index|models/([^/]+)/(load|unload))$").expect("repository path pattern")
});

/// The category of an HTTP path, in the order Triton's `HTTPAPIServer::Handle` tries its
/// patterns; `None` for a path Triton answers 404 (no category to check).
pub fn http_category(path: &str) -> Option<Category> {
    match path {
        "/v2/models/stats" => return Some(Category::Statistics),
        "/v2/logging" => return Some(Category::Logging),
        "/v2" => return Some(Category::Metadata),
        "/v2/trace/setting" => return Some(Category::Trace),
        _ => {}
    }
    if let Some(m) = MODEL.captures(path) {
        return match m.get(3).map(|k| k.as_str()) {
            None => Some(Category::Metadata),
            Some("ready") => Some(Category::Health),
            Some("infer" | "generate" | "generate_stream") => Some(Category::Inference),
            Some("config") => Some(Category::ModelConfig),
            Some("stats") => Some(Category::Statistics),
            // Triton has no per-version trace setting: that path falls through to 404.
            Some(_) if m.get(2).is_some() => None,
            Some(_) => Some(Category::Trace),
        };
    }
    if SERVER.is_match(path) {
        Some(Category::Health)
    } else if SHARED_MEMORY.is_match(path) {
        Some(Category::SharedMemory)
    } else if REPOSITORY.is_match(path) {
        Some(Category::ModelRepository)
    } else {
        None
    }
}

/// The category of a gRPC method path (`/package.Service/Method`), as Triton's gRPC server
/// assigns them; `None` for a method Triton does not serve.
pub fn grpc_category(path: &str) -> Option<Category> {
    let (service, method) = path.strip_prefix('/')?.split_once('/')?;
    match service {
        "grpc.health.v1.Health" => Some(Category::Health),
        "inference.GRPCInferenceService" => Some(match method {
            "ServerLive" | "ServerReady" | "ModelReady" => Category::Health,
            "ServerMetadata" | "ModelMetadata" => Category::Metadata,
            "ModelInfer" | "ModelStreamInfer" => Category::Inference,
            "ModelConfig" => Category::ModelConfig,
            "ModelStatistics" => Category::Statistics,
            "TraceSetting" => Category::Trace,
            "LogSettings" => Category::Logging,
            "SystemSharedMemoryStatus"
            | "SystemSharedMemoryRegister"
            | "SystemSharedMemoryUnregister"
            | "CudaSharedMemoryStatus"
            | "CudaSharedMemoryRegister"
            | "CudaSharedMemoryUnregister" => Category::SharedMemory,
            "RepositoryIndex" | "RepositoryModelLoad" | "RepositoryModelUnload" => Category::ModelRepository,
            _ => return None,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_tritons_groups() {
        let r = Restrictions::http(&flags(&["model-repository,health:Admin-Key=secret", "inference:k=a=b"])).unwrap();
        let admin = Restriction { key: "Admin-Key".into(), value: "secret".into() };
        assert_eq!(r.get(Category::ModelRepository), Some(&admin));
        assert_eq!(r.get(Category::Health), Some(&admin));
        assert_eq!(r.get(Category::Inference), Some(&Restriction { key: "k".into(), value: "a=b".into() }));
        assert_eq!(r.get(Category::Metadata), None);
        assert!(Restrictions::http(&[]).unwrap().is_empty());
        let g = Restrictions::grpc(&flags(&["shared-memory:admin-key=s"])).unwrap();
        assert_eq!(g.get(Category::SharedMemory).unwrap().key, "triton-grpc-protocol-admin-key");
    }

    #[test]
    fn refuses_what_triton_refuses() {
        let cases = [
            ("foo:a=b", "unknown restricted api 'foo'"),
            ("health,,metadata:a=b", "unknown restricted api ''"),
            ("health", "--http-restricted-api option format is '<config name>:<setting>=<value>'. Got health"),
            ("health:a", "option format"),
            ("health:=b", "option format"),
            ("health:a=", "option format"),
            (":a=b", "option format"),
            // Triton's --help shows a comma before the key; its parser wants a colon.
            ("model-repository,admin-key=secret", "option format"),
        ];
        for (arg, want) in cases {
            let err = Restrictions::http(&flags(&[arg])).unwrap_err();
            assert!(err.contains(want), "{arg}: {err}");
        }
        let err = Restrictions::grpc(&flags(&["health:a=b", "metadata,health:c=d"])).unwrap_err();
        assert_eq!(err, "restricted protocol 'health' can not be specified in multiple config groups");
        let err = Restrictions::grpc(&flags(&["bar:a=b"])).unwrap_err();
        assert_eq!(err, "unknown restricted protocol 'bar'");
        let err = Restrictions::grpc(&flags(&["health,actors:a=b"])).unwrap_err();
        assert!(err.contains("'actors' is the actor page on the metrics port"), "{err}");
        let r = Restrictions::http(&flags(&["actors,statistics:k=v"])).unwrap();
        assert_eq!(r.get(Category::Actors), Some(&Restriction { key: "k".into(), value: "v".into() }));
    }

    #[test]
    fn a_request_passes_only_with_the_exact_value() {
        let r = Restrictions::http(&flags(&["health:admin-key=secret"])).unwrap();
        let with = |v: Option<&'static [u8]>| r.refuses(Some(Category::Health), |_| v).is_none();
        assert!(with(Some(b"secret")));
        assert!(!with(Some(b"Secret")) && !with(Some(b"secret ")) && !with(None));
        assert!(r.refuses(Some(Category::Inference), |_| None).is_none(), "unrestricted category");
        assert!(r.refuses(None, |_| None).is_none(), "unknown path");
        let refused = r.refuses(Some(Category::Health), |_| None).unwrap();
        assert_eq!(http_message(refused), "This API is restricted, expecting header 'admin-key'");
        assert_eq!(grpc_message(refused), "This protocol is restricted, expecting header 'admin-key'");
    }

    #[test]
    fn every_http_path_has_tritons_category() {
        use Category::*;
        let cases = [
            ("/v2/health/live", Some(Health)),
            ("/v2/health/ready", Some(Health)),
            ("/v2/models/m/ready", Some(Health)),
            ("/v2/models/m/versions/2/ready", Some(Health)),
            ("/v2", Some(Metadata)),
            ("/v2/models/m", Some(Metadata)),
            ("/v2/models/m/versions/1", Some(Metadata)),
            ("/v2/models/m/infer", Some(Inference)),
            ("/v2/models/m/versions/3/infer", Some(Inference)),
            ("/v2/models/m/generate", Some(Inference)),
            ("/v2/models/m/config", Some(ModelConfig)),
            ("/v2/models/stats", Some(Statistics)),
            ("/v2/models/m/stats", Some(Statistics)),
            ("/v2/models/m/versions/1/stats", Some(Statistics)),
            ("/v2/trace/setting", Some(Trace)),
            ("/v2/models/m/trace/setting", Some(Trace)),
            ("/v2/models/m/versions/1/trace/setting", None),
            ("/v2/logging", Some(Logging)),
            ("/v2/systemsharedmemory/status", Some(SharedMemory)),
            ("/v2/systemsharedmemory/region/r/register", Some(SharedMemory)),
            ("/v2/systemsharedmemory/unregister", Some(SharedMemory)),
            ("/v2/cudasharedmemory/region/r/status", Some(SharedMemory)),
            ("/v2/repository/index", Some(ModelRepository)),
            ("/v2/repository/models/m/load", Some(ModelRepository)),
            ("/v2/repository/models/m/unload", Some(ModelRepository)),
            ("/v2/health", None),
            ("/v2/models/m/versions/x", None),
            ("/metrics", None),
            ("/", None),
        ];
        for (path, want) in cases {
            assert_eq!(http_category(path), want, "{path}");
        }
    }

    #[test]
    fn every_grpc_method_has_tritons_category() {
        use Category::*;
        let svc = "/inference.GRPCInferenceService/";
        let cases = [
            ("ServerLive", Health),
            ("ServerReady", Health),
            ("ModelReady", Health),
            ("ServerMetadata", Metadata),
            ("ModelMetadata", Metadata),
            ("ModelInfer", Inference),
            ("ModelStreamInfer", Inference),
            ("ModelConfig", ModelConfig),
            ("ModelStatistics", Statistics),
            ("TraceSetting", Trace),
            ("LogSettings", Logging),
            ("SystemSharedMemoryRegister", SharedMemory),
            ("CudaSharedMemoryUnregister", SharedMemory),
            ("RepositoryIndex", ModelRepository),
            ("RepositoryModelLoad", ModelRepository),
            ("RepositoryModelUnload", ModelRepository),
        ];
        for (method, want) in cases {
            assert_eq!(grpc_category(&format!("{svc}{method}")), Some(want), "{method}");
        }
        assert_eq!(grpc_category("/grpc.health.v1.Health/Check"), Some(Health));
        assert_eq!(grpc_category(&format!("{svc}Nope")), None);
        assert_eq!(grpc_category("/other.Service/ServerLive"), None);
    }
}
