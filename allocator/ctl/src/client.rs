//! Connecting `leasectl` to a cluster: settings from flags, environment and config file,
//! mutual TLS, and following a follower's pointer to the leader.

use super::args::ConnArgs;
use super::error::CtlError;
use leasehold_proto::leasehold::v1::admin_service_client::AdminServiceClient;
use leasehold_proto::{ADMIN_MESSAGE_LEN_MAX, LEADER_METADATA_KEY};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// `~/.config/leasehold/leasectl.yaml`: defaults for the connection flags.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub server: Option<String>,
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub server_name: Option<String>,
    #[serde(default)]
    pub insecure: bool,
}

/// Fully resolved connection settings.
#[derive(Debug, Clone)]
pub struct Settings {
    pub server: String,
    pub tls: Option<TlsSettings>,
    pub timeout: Duration,
}

#[derive(Debug, Clone)]
pub struct TlsSettings {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub server_name: String,
}

fn default_config_path() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    Some(PathBuf::from(home).join(".config/leasehold/leasectl.yaml"))
}

fn read_file_config(path: &Path, explicit: bool) -> Result<FileConfig, CtlError> {
    match leasehold_common::read::read_text_capped(path, CONFIG_FILE_LEN_MAX) {
        Ok(text) => serde_norway::from_str(&text)
            .map_err(|e| CtlError::Config(format!("{}: {e}", path.display()))),
        Err(e) if !explicit && e.kind() == std::io::ErrorKind::NotFound => {
            Ok(FileConfig::default())
        }
        Err(e) => Err(CtlError::Config(format!(
            "cannot read {}: {e}",
            path.display()
        ))),
    }
}

impl Settings {
    pub fn resolve(args: &ConnArgs) -> Result<Settings, CtlError> {
        let file = match (&args.config, default_config_path()) {
            (Some(p), _) => read_file_config(p, true)?,
            (None, Some(p)) => read_file_config(&p, false)?,
            (None, None) => FileConfig::default(),
        };
        let server = args.server.clone().or(file.server).ok_or_else(|| {
            CtlError::Config(
                "no server: pass --server HOST:PORT, set LEASEHOLD_SERVER, or add `server:` to ~/.config/leasehold/leasectl.yaml".into(),
            )
        })?;
        let insecure = args.insecure || file.insecure;
        let timeout = Duration::from_millis(args.timeout_ms.max(1));
        if insecure {
            return Ok(Settings {
                server,
                tls: None,
                timeout,
            });
        }
        let need = |flag: &str, v: Option<PathBuf>| {
            v.ok_or_else(|| {
                CtlError::Config(format!(
                    "mutual TLS needs --{flag} (or LEASEHOLD_{}); use --insecure only for a cluster started with --insecure",
                    flag.to_uppercase()
                ))
            })
        };
        let ca = need("ca", args.ca.clone().or(file.ca))?;
        let cert = need("cert", args.cert.clone().or(file.cert))?;
        let key = need("key", args.key.clone().or(file.key))?;
        let host = server.rsplit_once(':').map_or(server.as_str(), |(h, _)| h);
        let server_name = args
            .server_name
            .clone()
            .or(file.server_name)
            .unwrap_or_else(|| host.trim_matches(['[', ']']).to_string());
        Ok(Settings {
            server,
            tls: Some(TlsSettings {
                ca,
                cert,
                key,
                server_name,
            }),
            timeout,
        })
    }
}

/// Largest leasectl config file, CA, certificate or key read, in bytes.
const CONFIG_FILE_LEN_MAX: u64 = 1024 * 1024;

fn read(path: &Path, what: &str) -> Result<Vec<u8>, CtlError> {
    leasehold_common::read::read_capped(path, CONFIG_FILE_LEN_MAX)
        .map_err(|e| CtlError::Config(format!("cannot read {what} {}: {e}", path.display())))
}

/// Opens a channel to `addr` with the settings' security.
pub async fn connect(settings: &Settings, addr: &str) -> Result<Channel, CtlError> {
    let scheme = if settings.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let mut endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))
        .map_err(|e| CtlError::Config(format!("bad server address '{addr}': {e}")))?
        .timeout(settings.timeout)
        .connect_timeout(settings.timeout);
    if let Some(tls) = &settings.tls {
        let config = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(read(&tls.ca, "CA certificate")?))
            .identity(Identity::from_pem(
                read(&tls.cert, "client certificate")?,
                read(&tls.key, "client key")?,
            ))
            .domain_name(tls.server_name.clone());
        endpoint = endpoint
            .tls_config(config)
            .map_err(|e| CtlError::Config(format!("TLS settings: {e}")))?;
    }
    endpoint
        .connect()
        .await
        .map_err(|e| CtlError::Connect(format!("{addr}: {e}")))
}

/// An admin client that follows leader redirects. It connects on its first call, so a
/// command checks its own input (files, flags) before it needs a server.
pub struct Admin {
    settings: Settings,
    client: Option<AdminServiceClient<Channel>>,
}

impl Admin {
    pub fn new(settings: Settings) -> Admin {
        Admin {
            settings,
            client: None,
        }
    }

    async fn client(&mut self) -> Result<AdminServiceClient<Channel>, CtlError> {
        if let Some(c) = &self.client {
            return Ok(c.clone());
        }
        let channel = connect(&self.settings, &self.settings.server).await?;
        let client = admin_client(channel);
        self.client = Some(client.clone());
        Ok(client)
    }

    /// Runs `call`; while the node answers that another node leads, reconnects there and
    /// runs it again, at most [`REDIRECTS_MAX`] times (a new leader may still be settling).
    pub async fn call<T, F, Fut>(&mut self, mut call: F) -> Result<T, CtlError>
    where
        F: FnMut(AdminServiceClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let mut redirects = 0;
        loop {
            let status = match call(self.client().await?).await {
                Ok(resp) => return Ok(resp.into_inner()),
                Err(status) => status,
            };
            let Some(leader) = leader_of(&status) else {
                return Err(CtlError::Rpc(status));
            };
            if redirects == REDIRECTS_MAX {
                return Err(CtlError::Rpc(status));
            }
            if redirects > 0 {
                tokio::time::sleep(Duration::from_millis(REDIRECT_BACKOFF_MS)).await;
            }
            redirects += 1;
            let channel = connect(&self.settings, &leader).await?;
            self.client = Some(admin_client(channel));
        }
    }
}

/// A backup travels whole in one message, both ways.
fn admin_client(channel: Channel) -> AdminServiceClient<Channel> {
    AdminServiceClient::new(channel)
        .max_decoding_message_size(ADMIN_MESSAGE_LEN_MAX)
        .max_encoding_message_size(ADMIN_MESSAGE_LEN_MAX)
}

/// Leader redirects followed per command, and the pause between repeated ones.
const REDIRECTS_MAX: u32 = 5;
const REDIRECT_BACKOFF_MS: u64 = 200;

fn leader_of(status: &tonic::Status) -> Option<String> {
    if status.code() != tonic::Code::Unavailable {
        return None;
    }
    let addr = status.metadata().get(LEADER_METADATA_KEY)?.to_str().ok()?;
    (!addr.is_empty()).then(|| addr.to_string())
}
