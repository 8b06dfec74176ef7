//! The diagnostics server's certificate: `tls.crt` and `tls.key` of a directory, re-read every
//! [`CERT_RELOAD_PERIOD`] so that a renewed one is used for new connections without a restart,
//! and a pair that cannot be read or used is reported and the one in use kept; without a
//! directory, a self-signed one generated at start.
//!
//! [`CERT_RELOAD_PERIOD`]: super::CERT_RELOAD_PERIOD
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum_server::tls_rustls::RustlsConfig;

use crate::telemetry::tls::TlsPolicy;

/// The content of a certificate directory's `tls.crt` and `tls.key`.
pub type PemPair = (Vec<u8>, Vec<u8>);

/// The certificate: `tls.crt` and `tls.key` of `cert_dir`, else a self-signed one, served under
/// `policy`; and, with a directory, the bytes loaded from it, for [`reload_certificates`] to
/// compare against.
pub async fn tls_config(
    cert_dir: Option<&Path>,
    policy: &TlsPolicy,
) -> anyhow::Result<(RustlsConfig, Option<PemPair>)> {
    match cert_dir {
        Some(dir) => {
            let context = || {
                format!(
                    "loading the diagnostics certificate {} and key {} (--diagnostics-cert-dir)",
                    dir.join("tls.crt").display(),
                    dir.join("tls.key").display()
                )
            };
            let pair = read_pair(dir).await.with_context(context)?;
            let config = policy
                .server_config(&pair.0, &pair.1)
                .with_context(context)?;
            Ok((RustlsConfig::from_config(Arc::new(config)), Some(pair)))
        }
        None => {
            let (cert, key) = self_signed_pem()?;
            let config = policy
                .server_config(cert.as_bytes(), key.as_bytes())
                .context("using the generated self-signed diagnostics certificate")?;
            Ok((RustlsConfig::from_config(Arc::new(config)), None))
        }
    }
}

async fn read_pair(dir: &Path) -> std::io::Result<PemPair> {
    let cert = tokio::fs::read(dir.join("tls.crt")).await?;
    let key = tokio::fs::read(dir.join("tls.key")).await?;
    Ok((cert, key))
}

/// What one look at the certificate directory did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reload {
    /// The pair is the one last seen.
    Unchanged,
    /// A new pair is used for new connections.
    Reloaded,
    /// The pair cannot be read; the one in use is kept.
    Unreadable,
    /// The pair changed but cannot be used; the one in use is kept.
    Rejected,
}

/// Looks once at `tls.crt` and `tls.key` of `dir`: when their content differs from `last`, uses
/// them for new connections of `tls` and remembers them in `last` (a pair that cannot be used
/// too, so that it is reported once).
pub async fn reload_once(
    tls: &RustlsConfig,
    policy: &TlsPolicy,
    dir: &Path,
    last: &mut Option<PemPair>,
) -> Reload {
    let pair = match read_pair(dir).await {
        Ok(pair) => pair,
        Err(e) => {
            tracing::warn!(
                dir = %dir.display(),
                error = %e,
                "diagnostics certificate unreadable; keeping the one in use"
            );
            return Reload::Unreadable;
        }
    };
    if last.as_ref() == Some(&pair) {
        return Reload::Unchanged;
    }
    let outcome = match policy.server_config(&pair.0, &pair.1) {
        Ok(fresh) => {
            tls.reload_from_config(Arc::new(fresh));
            tracing::info!(dir = %dir.display(), "diagnostics certificate reloaded");
            Reload::Reloaded
        }
        Err(e) => {
            tracing::warn!(
                dir = %dir.display(),
                error = %e,
                "diagnostics certificate changed but cannot be used; keeping the one in use"
            );
            Reload::Rejected
        }
    };
    *last = Some(pair);
    outcome
}

/// Keeps `tls` at the certificate and key of `dir`: every `period`, [`reload_once`], starting
/// from `loaded`, the pair `tls` was built from ([`tls_config`]), so that a pair renewed between
/// loading and this watcher's start is not missed. Runs until dropped.
pub async fn reload_certificates(
    tls: RustlsConfig,
    policy: TlsPolicy,
    dir: PathBuf,
    period: Duration,
    loaded: Option<PemPair>,
) {
    let mut last = loaded;
    loop {
        tokio::time::sleep(period).await;
        reload_once(&tls, &policy, &dir, &mut last).await;
    }
}

/// A self-signed certificate and its key (PEM) for `localhost`, `127.0.0.1`, `::1` and this
/// host's name.
pub fn self_signed_pem() -> anyhow::Result<(String, String)> {
    let mut names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    let host = std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty() && !names.contains(h));
    names.extend(host);
    let certified = rcgen::generate_simple_self_signed(names)
        .context("generating the self-signed diagnostics certificate")?;
    Ok((certified.cert.pem(), certified.signing_key.serialize_pem()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory for one test.
    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "inpool-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Writes `tls.crt` and `tls.key` of `dir` as cert-manager's kubelet-projected secrets
    /// change: each file whole, through a temporary file and a rename.
    fn write_pair(dir: &Path, (cert, key): (String, String)) {
        for (name, text) in [("tls.crt", cert), ("tls.key", key)] {
            let temp = dir.join(format!(".{name}.tmp"));
            std::fs::write(&temp, text).unwrap();
            std::fs::rename(&temp, dir.join(name)).unwrap();
        }
    }

    fn offers_only_http1(tls: &RustlsConfig) -> bool {
        tls.get_inner().alpn_protocols == [b"http/1.1".to_vec()]
    }

    #[tokio::test]
    async fn a_renewed_certificate_is_reloaded_and_a_broken_one_ignored() {
        let dir = temp_dir("cert-reload");
        write_pair(&dir, self_signed_pem().unwrap());
        let (tls, loaded) = tls_config(Some(&dir), &TlsPolicy::default()).await.unwrap();
        assert!(offers_only_http1(&tls));
        let first = tls.get_inner();
        let mut last = loaded;
        assert_eq!(
            reload_once(&tls, &TlsPolicy::default(), &dir, &mut last).await,
            Reload::Unchanged
        );
        assert!(Arc::ptr_eq(&first, &tls.get_inner()));

        write_pair(&dir, ("not a certificate".into(), "nor a key".into()));
        assert_eq!(
            reload_once(&tls, &TlsPolicy::default(), &dir, &mut last).await,
            Reload::Rejected
        );
        assert!(
            Arc::ptr_eq(&first, &tls.get_inner()),
            "a broken pair was used"
        );
        assert_eq!(
            reload_once(&tls, &TlsPolicy::default(), &dir, &mut last).await,
            Reload::Unchanged,
            "a broken pair is reported once"
        );

        write_pair(&dir, self_signed_pem().unwrap());
        assert_eq!(
            reload_once(&tls, &TlsPolicy::default(), &dir, &mut last).await,
            Reload::Reloaded
        );
        assert!(!Arc::ptr_eq(&first, &tls.get_inner()));
        assert!(
            offers_only_http1(&tls),
            "a reloaded certificate keeps HTTP/1.1 only"
        );
        assert_eq!(
            reload_once(&tls, &TlsPolicy::default(), &dir, &mut last).await,
            Reload::Unchanged
        );

        std::fs::remove_file(dir.join("tls.key")).unwrap();
        let current = tls.get_inner();
        assert_eq!(
            reload_once(&tls, &TlsPolicy::default(), &dir, &mut last).await,
            Reload::Unreadable
        );
        assert!(Arc::ptr_eq(&current, &tls.get_inner()));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn a_certificate_renewed_between_loading_and_watching_is_picked_up() {
        let dir = temp_dir("cert-renewed-at-start");
        write_pair(&dir, self_signed_pem().unwrap());
        let (tls, loaded) = tls_config(Some(&dir), &TlsPolicy::default()).await.unwrap();
        let first = tls.get_inner();
        // Renewed before the watcher's first look: it compares with what was loaded.
        write_pair(&dir, self_signed_pem().unwrap());
        let mut last = loaded;
        assert_eq!(
            reload_once(&tls, &TlsPolicy::default(), &dir, &mut last).await,
            Reload::Reloaded
        );
        assert!(!Arc::ptr_eq(&first, &tls.get_inner()));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn the_self_signed_certificate_offers_only_http1() {
        let (tls, loaded) = tls_config(None, &TlsPolicy::default()).await.unwrap();
        assert!(loaded.is_none());
        assert!(offers_only_http1(&tls));
    }

    #[test]
    fn the_self_signed_certificate_is_pem() {
        let (cert, key) = self_signed_pem().unwrap();
        assert!(cert.starts_with("-----BEGIN CERTIFICATE-----"), "{cert}");
        assert!(key.contains("PRIVATE KEY-----"), "{key}");
    }
}
