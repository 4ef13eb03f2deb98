//! Which credentials and settings an object-storage repository is opened with, as Triton picks
//! them, and the `object_store` client built from them.
//!
//! With `TRITON_CLOUD_CREDENTIAL_PATH` set, Triton's JSON file is read: per scheme (`s3`, `gs`,
//! `as`) a map from URL prefix to credentials, the longest prefix of the repository's URL winning
//! (`""` matches every URL). Otherwise (or when no entry matches) the usual sources apply:
//! S3 takes `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/`AWS_SESSION_TOKEN`, else the
//! `AWS_PROFILE` (or `default`) profile of `~/.aws/credentials`, else what `object_store` finds
//! itself (web identity, container and instance credentials); the region is
//! `AWS_DEFAULT_REGION`, `AWS_REGION`, the profile's in `~/.aws/config`, else `us-east-1`. GCS takes
//! `GOOGLE_APPLICATION_CREDENTIALS`; Azure `AZURE_STORAGE_KEY` (Triton's name) for the URL's
//! account.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::{ClientOptions, ObjectStore, RetryConfig};
use serde::Deserialize;

use super::url::{Location, RemoteUrl};

/// Triton's credential file (`TRITON_CLOUD_CREDENTIAL_PATH`).
#[derive(Debug, Default, Deserialize)]
pub struct CredentialFile {
    #[serde(default)]
    s3: BTreeMap<String, S3Entry>,
    /// URL prefix → path of a Google application-credentials file.
    #[serde(default)]
    gs: BTreeMap<String, String>,
    #[serde(default, rename = "as")]
    azure: BTreeMap<String, AzureEntry>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
struct S3Entry {
    secret_key: String,
    key_id: String,
    region: String,
    session_token: String,
    profile: String,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
struct AzureEntry {
    account_str: String,
    account_key: String,
}

impl CredentialFile {
    /// Reads the file `TRITON_CLOUD_CREDENTIAL_PATH` names, if it is set.
    pub fn from_env(env: &Env) -> Result<Option<CredentialFile>, String> {
        let Some(path) = env("TRITON_CLOUD_CREDENTIAL_PATH") else { return Ok(None) };
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read TRITON_CLOUD_CREDENTIAL_PATH file {path}: {e}"))?;
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| format!("TRITON_CLOUD_CREDENTIAL_PATH file {path} is not Triton's credential JSON: {e}"))
    }
}

/// The entry whose key is the longest prefix of `url`.
fn longest_prefix<'a, T>(map: &'a BTreeMap<String, T>, url: &str) -> Option<&'a T> {
    map.iter().filter(|(k, _)| url.starts_with(k.as_str())).max_by_key(|(k, _)| k.len()).map(|(_, v)| v)
}

/// Looks up an environment variable (a closure, so tests need not touch the process's).
pub type Env = dyn Fn(&str) -> Option<String>;

/// The process environment, empty values counting as unset.
pub fn process_env(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.is_empty())
}

/// What an S3 client is opened with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Settings {
    pub key_id: Option<String>,
    pub secret_key: Option<String>,
    pub session_token: Option<String>,
    pub region: String,
    /// Where the keys came from (logged): "credential file", "environment", "profile NAME", or
    /// "default chain" (object_store's own web-identity, container and instance sources).
    pub source: String,
}

fn nonempty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

fn home_file(env: &Env, var: &str, default: &str) -> Option<PathBuf> {
    env(var).map(PathBuf::from).or_else(|| env("HOME").map(|h| PathBuf::from(h).join(default)))
}

/// A profile's keys: access key id, secret key, session token.
type ProfileKeys = (String, String, Option<String>);

/// A profile's keys from the shared credentials file and its region from the config file.
fn profile(env: &Env, name: &str) -> Result<(Option<ProfileKeys>, Option<String>), String> {
    let mut keys = None;
    if let Some(path) = home_file(env, "AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials").filter(|p| p.exists()) {
        let ini = ini::Ini::load_from_file(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        if let Some(section) = ini.section(Some(name)) {
            if let (Some(id), Some(secret)) = (section.get("aws_access_key_id"), section.get("aws_secret_access_key")) {
                keys = Some((id.to_string(), secret.to_string(), section.get("aws_session_token").map(str::to_string)));
            }
        }
    }
    let mut region = None;
    if let Some(path) = home_file(env, "AWS_CONFIG_FILE", ".aws/config").filter(|p| p.exists()) {
        let ini = ini::Ini::load_from_file(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let section_name = if name == "default" { name.to_string() } else { format!("profile {name}") };
        region = ini.section(Some(section_name)).and_then(|s| s.get("region")).map(str::to_string);
    }
    Ok((keys, region))
}

/// The S3 credentials and region for `url`, in Triton's order of sources.
pub fn s3_settings(url: &RemoteUrl, env: &Env, file: Option<&CredentialFile>) -> Result<S3Settings, String> {
    let entry = file.and_then(|f| longest_prefix(&f.s3, &url.url)).cloned();
    let mut s = S3Settings {
        key_id: None,
        secret_key: None,
        session_token: None,
        region: String::new(),
        source: String::new(),
    };
    let mut profile_name = None;
    if let Some(e) = &entry {
        if !e.key_id.is_empty() {
            s.key_id = nonempty(&e.key_id);
            s.secret_key = nonempty(&e.secret_key);
            s.session_token = nonempty(&e.session_token);
            s.source = "credential file".into();
        } else if !e.profile.is_empty() {
            profile_name = Some(e.profile.clone());
        }
        s.region = e.region.clone();
    }
    if s.key_id.is_none() && profile_name.is_none() {
        if let (Some(id), Some(secret)) = (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
            s.key_id = Some(id);
            s.secret_key = Some(secret);
            s.session_token = env("AWS_SESSION_TOKEN");
            s.source = "environment".into();
        }
    }
    let name = profile_name.clone().or_else(|| env("AWS_PROFILE")).unwrap_or_else(|| "default".into());
    let (keys, profile_region) = profile(env, &name)?;
    if s.key_id.is_none() {
        match keys {
            Some((id, secret, token)) => {
                s.key_id = Some(id);
                s.secret_key = Some(secret);
                s.session_token = token;
                s.source = format!("profile {name}");
            }
            None if profile_name.is_some() => {
                return Err(format!(
                    "AWS profile '{name}' (named for {url}) has no keys in the shared credentials file"
                ))
            }
            None => s.source = "default chain".into(),
        }
    }
    if s.region.is_empty() {
        s.region = env("AWS_DEFAULT_REGION")
            .or_else(|| env("AWS_REGION"))
            .or(profile_region)
            .unwrap_or_else(|| "us-east-1".into());
    }
    Ok(s)
}

/// The GCS application-credentials file for `url`, if one is named.
pub fn gcs_credentials(url: &RemoteUrl, env: &Env, file: Option<&CredentialFile>) -> Option<String> {
    file.and_then(|f| longest_prefix(&f.gs, &url.url)).cloned().or_else(|| env("GOOGLE_APPLICATION_CREDENTIALS"))
}

/// The Azure storage key for `url`'s account, if one is given.
pub fn azure_key(url: &RemoteUrl, env: &Env, file: Option<&CredentialFile>) -> Option<String> {
    let Location::Azure { account, .. } = &url.location else { return None };
    if let Some(e) = file.and_then(|f| longest_prefix(&f.azure, &url.url)) {
        if (e.account_str.is_empty() || &e.account_str == account) && !e.account_key.is_empty() {
            return Some(e.account_key.clone());
        }
    }
    env("AZURE_STORAGE_KEY")
}

/// Short retries and a connect timeout: an unreachable endpoint fails in seconds (at start, or
/// for one poll), not after object_store's three minutes of retries.
///
/// No overall request timeout (object_store's 30 s would cut a large model's download short):
/// the mirror ends a listing or a download that stops making progress instead.
fn client_options() -> (ClientOptions, RetryConfig) {
    let retry = RetryConfig { max_retries: 2, retry_timeout: Duration::from_secs(15), ..Default::default() };
    let options =
        ClientOptions::new().with_connect_timeout(Duration::from_secs(5)).with_timeout_disabled().with_allow_http(true);
    (options, retry)
}

/// The client of `url`'s bucket or container.
pub fn open_store(url: &RemoteUrl, env: &Env, file: Option<&CredentialFile>) -> Result<Arc<dyn ObjectStore>, String> {
    let (options, retry) = client_options();
    let built: object_store::Result<Arc<dyn ObjectStore>> = match &url.location {
        Location::S3 { endpoint, bucket } => {
            let s = s3_settings(url, env, file)?;
            tracing::info!("model repository {url}: S3 credentials from {}, region {}", s.source, s.region);
            let mut b = AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .with_region(&s.region)
                .with_client_options(options)
                .with_retry(retry);
            if let (Some(id), Some(secret)) = (s.key_id, s.secret_key) {
                b = b.with_access_key_id(id).with_secret_access_key(secret);
                if let Some(token) = s.session_token {
                    b = b.with_token(token);
                }
            }
            if let Some(endpoint) = endpoint {
                // S3-compatible servers take path-style requests (host:port/bucket/key).
                b = b.with_endpoint(endpoint).with_virtual_hosted_style_request(false);
            }
            b.build().map(|s| Arc::new(s) as Arc<dyn ObjectStore>)
        }
        Location::Gcs { bucket } => {
            let mut b = GoogleCloudStorageBuilder::from_env()
                .with_bucket_name(bucket)
                .with_client_options(options)
                .with_retry(retry);
            if let Some(path) = gcs_credentials(url, env, file) {
                b = b.with_application_credentials(path);
            }
            b.build().map(|s| Arc::new(s) as Arc<dyn ObjectStore>)
        }
        Location::Azure { account, container } => {
            let mut b = MicrosoftAzureBuilder::from_env()
                .with_account(account)
                .with_container_name(container)
                .with_client_options(options)
                .with_retry(retry);
            if let Some(key) = azure_key(url, env, file) {
                b = b.with_access_key(key);
            }
            b.build().map(|s| Arc::new(s) as Arc<dyn ObjectStore>)
        }
    };
    built.map_err(|e| format!("model repository {url}: cannot configure the {} client: {e}", url.scheme()))
}

#[cfg(test)]
mod tests {
    use super::super::url::parse;
    use super::*;

    fn env_of(pairs: &[(&str, String)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        move |k| map.get(k).cloned()
    }

    const FILE: &str = r#"{
      "gs": {"": "/creds/gcs-default.json", "gs://gcs-bucket-002": "/creds/gcs-2.json"},
      "s3": {
        "": {"secret_key": "S", "key_id": "K", "region": "eu-west-1", "session_token": "", "profile": ""},
        "s3://s3-bucket-002": {"secret_key": "S2", "key_id": "K2", "region": "us-west-2",
                               "session_token": "T2", "profile": ""},
        "s3://by-profile": {"profile": "team"}
      },
      "as": {"": {"account_str": "acct", "account_key": "AKEY"},
             "as://other/cont": {"account_str": "", "account_key": ""}}
    }"#;

    #[test]
    fn the_credential_file_picks_the_longest_prefix() {
        let file: CredentialFile = serde_json::from_str(FILE).unwrap();
        let env = env_of(&[("AWS_ACCESS_KEY_ID", "ENVK".into()), ("AWS_SECRET_ACCESS_KEY", "ENVS".into())]);
        let s = s3_settings(&parse("s3://s3-bucket-002/models").unwrap(), &env, Some(&file)).unwrap();
        assert_eq!(
            (s.key_id.as_deref(), s.secret_key.as_deref(), s.session_token.as_deref(), s.region.as_str()),
            (Some("K2"), Some("S2"), Some("T2"), "us-west-2")
        );
        let s = s3_settings(&parse("s3://elsewhere/models").unwrap(), &env, Some(&file)).unwrap();
        assert_eq!((s.key_id.as_deref(), s.session_token, s.region.as_str()), (Some("K"), None, "eu-west-1"));
        assert_eq!(s.source, "credential file");
        assert_eq!(
            gcs_credentials(&parse("gs://gcs-bucket-002/m").unwrap(), &env, Some(&file)).unwrap(),
            "/creds/gcs-2.json"
        );
        assert_eq!(gcs_credentials(&parse("gs://b/m").unwrap(), &env, Some(&file)).unwrap(), "/creds/gcs-default.json");
        assert_eq!(azure_key(&parse("as://acct/c/m").unwrap(), &env, Some(&file)).as_deref(), Some("AKEY"));
        // The longer entry has no key: the environment's, if any.
        assert_eq!(azure_key(&parse("as://other/cont/m").unwrap(), &env, Some(&file)), None);
        let env = env_of(&[("AZURE_STORAGE_KEY", "EK".into())]);
        assert_eq!(azure_key(&parse("as://other/cont/m").unwrap(), &env, Some(&file)).as_deref(), Some("EK"));
    }

    #[test]
    fn without_a_file_the_environment_then_the_profile() {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(home.path().join(".aws")).unwrap();
        std::fs::write(
            home.path().join(".aws/credentials"),
            "[default]\naws_access_key_id = DK\naws_secret_access_key = DS\n\n[team]\naws_access_key_id = TK\naws_secret_access_key = TS\naws_session_token = TT\n",
        )
        .unwrap();
        std::fs::write(
            home.path().join(".aws/config"),
            "[default]\nregion = ap-south-1\n[profile team]\nregion = sa-east-1\n",
        )
        .unwrap();
        let url = parse("s3://127.0.0.1:9000/b/p").unwrap();
        let h = home.path().display().to_string();
        let env = env_of(&[
            ("HOME", h.clone()),
            ("AWS_ACCESS_KEY_ID", "EK".into()),
            ("AWS_SECRET_ACCESS_KEY", "ES".into()),
            ("AWS_DEFAULT_REGION", "us-east-2".into()),
        ]);
        let s = s3_settings(&url, &env, None).unwrap();
        assert_eq!(
            (s.key_id.as_deref(), s.region.as_str(), s.source.as_str()),
            (Some("EK"), "us-east-2", "environment")
        );
        let s = s3_settings(&url, &env_of(&[("HOME", h.clone())]), None).unwrap();
        assert_eq!(
            (s.key_id.as_deref(), s.region.as_str(), s.source.as_str()),
            (Some("DK"), "ap-south-1", "profile default")
        );
        let s = s3_settings(&url, &env_of(&[("HOME", h.clone()), ("AWS_PROFILE", "team".into())]), None).unwrap();
        assert_eq!(
            (s.key_id.as_deref(), s.session_token.as_deref(), s.region.as_str()),
            (Some("TK"), Some("TT"), "sa-east-1")
        );
        // The credential file may name a profile; a profile without keys is an error naming the URL.
        let file: CredentialFile = serde_json::from_str(FILE).unwrap();
        let s =
            s3_settings(&parse("s3://by-profile/m").unwrap(), &env_of(&[("HOME", h.clone())]), Some(&file)).unwrap();
        assert_eq!((s.key_id.as_deref(), s.source.as_str()), (Some("TK"), "profile team"));
        let file: CredentialFile = serde_json::from_str(r#"{"s3": {"": {"profile": "nobody"}}}"#).unwrap();
        let e = s3_settings(&url, &env_of(&[("HOME", h)]), Some(&file)).unwrap_err();
        assert!(e.contains("'nobody'") && e.contains("s3://127.0.0.1:9000/b/p"), "{e}");
        // Nothing anywhere: object_store's own chain, in us-east-1.
        let s = s3_settings(&url, &env_of(&[]), None).unwrap();
        assert_eq!((s.key_id, s.region.as_str(), s.source.as_str()), (None, "us-east-1", "default chain"));
    }

    #[test]
    fn a_bad_credential_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("creds.json");
        std::fs::write(&path, "{\"s3\": [1]}").unwrap();
        let env = env_of(&[("TRITON_CLOUD_CREDENTIAL_PATH", path.display().to_string())]);
        let e = CredentialFile::from_env(&env).unwrap_err();
        assert!(e.contains(&path.display().to_string()), "{e}");
        let env = env_of(&[("TRITON_CLOUD_CREDENTIAL_PATH", "/nonexistent/creds.json".into())]);
        assert!(CredentialFile::from_env(&env).unwrap_err().contains("/nonexistent/creds.json"));
        assert!(CredentialFile::from_env(&env_of(&[])).unwrap().is_none());
    }

    #[test]
    fn every_backend_builds_a_client_through_object_store() {
        let env = env_of(&[]);
        for url in ["s3://127.0.0.1:9000/b/p", "s3://https://h:443/b", "s3://bucket/p", "as://acct/cont/p"] {
            let store = open_store(&parse(url).unwrap(), &env, None).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert!(!store.to_string().is_empty());
        }
        // GCS needs a service account or application credentials to build: a file that is not
        // one fails with a message naming the repository.
        let dir = tempfile::tempdir().unwrap();
        let creds = dir.path().join("adc.json");
        std::fs::write(&creds, "{}").unwrap();
        let env = env_of(&[("GOOGLE_APPLICATION_CREDENTIALS", creds.display().to_string())]);
        let e = open_store(&parse("gs://bucket/p").unwrap(), &env, None).err().unwrap();
        assert!(e.contains("gs://bucket/p"), "{e}");
    }
}
