//! The TLS policy of the diagnostics server, from CAPI's manager flags `--tls-min-version`,
//! `--tls-cipher-suites` and `--tls-curve-preferences` (`sigs.k8s.io/cluster-api/util/flags`),
//! with Go's names and meanings, on rustls with the ring provider:
//!
//! - **Versions**: `VersionTLS12` (the default) offers TLS 1.2 and 1.3, `VersionTLS13` only 1.3.
//!   rustls implements nothing older, so `VersionTLS10` and `VersionTLS11` are accepted and mean
//!   1.2 and 1.3, with a warning.
//! - **Cipher suites**: as Go's `tls.Config.CipherSuites`, the list picks the TLS 1.2 suites; the
//!   TLS 1.3 suites are not configurable (their names are accepted and change nothing). A Go
//!   suite that rustls does not implement (CBC, RC4, 3DES, RSA key exchange) is accepted with a
//!   warning and not offered. A name Go does not know is an error. Empty: every suite rustls
//!   offers.
//! - **Curves**: Go's numeric `CurveID`s. 23 (P-256), 24 (P-384) and 29 (X25519) map to the
//!   ring provider's groups; 25 (P-521) and 4588 (X25519MLKEM768) are accepted with a warning
//!   and not offered; other numbers are errors. As in Go, the order of the list is ignored.
//!   Empty: every group the provider offers.
//!
//! The names are listed here, not taken from a crate: the mapping from Go's names to rustls's
//! suites is the point, and no crate carries it.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::crypto::ring as provider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{CipherSuite, NamedGroup, ServerConfig, SupportedProtocolVersion};

/// The lowest TLS version offered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MinVersion {
    /// TLS 1.2 and 1.3.
    Tls12,
    /// TLS 1.3 only.
    Tls13,
}

/// What `--tls-min-version`, `--tls-cipher-suites` and `--tls-curve-preferences` asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsPolicy {
    pub min_version: MinVersion,
    /// TLS 1.2 suites to offer; empty: all.
    pub cipher_suites: Vec<CipherSuite>,
    /// Key exchange groups to offer; empty: all.
    pub groups: Vec<NamedGroup>,
}

impl Default for TlsPolicy {
    /// CAPI's defaults: TLS 1.2 and up, every suite and group.
    fn default() -> TlsPolicy {
        TlsPolicy {
            min_version: MinVersion::Tls12,
            cipher_suites: Vec::new(),
            groups: Vec::new(),
        }
    }
}

/// A flag value that is accepted but cannot be honoured in full (logged as a warning at start).
pub type Caveat = String;

/// Parses `--tls-min-version` (Go's `VersionTLS1x` names).
pub fn parse_min_version(text: &str) -> Result<(MinVersion, Option<Caveat>), String> {
    match text.trim() {
        "VersionTLS12" => Ok((MinVersion::Tls12, None)),
        "VersionTLS13" => Ok((MinVersion::Tls13, None)),
        old @ ("VersionTLS10" | "VersionTLS11") => Ok((
            MinVersion::Tls12,
            Some(format!(
                "--tls-min-version={old}: inpool's TLS (rustls) implements only TLS 1.2 and 1.3, \
                 so the diagnostics server offers those"
            )),
        )),
        other => Err(format!(
            "`{other}` is not a TLS version: use VersionTLS12 or VersionTLS13 \
             (VersionTLS10 and VersionTLS11 are accepted and mean VersionTLS12)"
        )),
    }
}

/// Go's TLS 1.2 suite names (and Kubernetes' legacy spellings) with the rustls suite, where
/// rustls implements it.
const TLS12_SUITES: &[(&str, Option<CipherSuite>)] = &[
    (
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        Some(CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256),
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        Some(CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384),
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        Some(CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256),
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
        Some(CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256),
    ),
    (
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        Some(CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256),
    ),
    (
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        Some(CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384),
    ),
    (
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        Some(CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256),
    ),
    (
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
        Some(CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256),
    ),
    ("TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", None),
    ("TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", None),
    ("TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256", None),
    ("TLS_ECDHE_ECDSA_WITH_RC4_128_SHA", None),
    ("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", None),
    ("TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", None),
    ("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256", None),
    ("TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA", None),
    ("TLS_ECDHE_RSA_WITH_RC4_128_SHA", None),
    ("TLS_RSA_WITH_AES_128_CBC_SHA", None),
    ("TLS_RSA_WITH_AES_256_CBC_SHA", None),
    ("TLS_RSA_WITH_AES_128_CBC_SHA256", None),
    ("TLS_RSA_WITH_AES_128_GCM_SHA256", None),
    ("TLS_RSA_WITH_AES_256_GCM_SHA384", None),
    ("TLS_RSA_WITH_3DES_EDE_CBC_SHA", None),
    ("TLS_RSA_WITH_RC4_128_SHA", None),
];

const TLS13_ONLY: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13];

/// Go's TLS 1.3 suite names: accepted, not configurable (as in Go).
const TLS13_SUITES: &[&str] = &[
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
];

/// Parses `--tls-cipher-suites` (comma-separated Go names) into the TLS 1.2 suites to offer.
pub fn parse_cipher_suites(names: &[String]) -> Result<(Vec<CipherSuite>, Vec<Caveat>), String> {
    let mut suites = Vec::new();
    let mut caveats = Vec::new();
    for name in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        if TLS13_SUITES.contains(&name) {
            continue;
        }
        match TLS12_SUITES.iter().find(|(go, _)| *go == name) {
            Some((_, Some(suite))) => {
                if !suites.contains(suite) {
                    suites.push(*suite);
                }
            }
            Some((_, None)) => caveats.push(format!(
                "--tls-cipher-suites: {name} is not implemented by inpool's TLS (rustls) and is \
                 not offered"
            )),
            None => {
                return Err(format!(
                    "`{name}` is not a cipher suite name of Go's crypto/tls (e.g. \
                     TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)"
                ));
            }
        }
    }
    // Only TLS 1.3 names, or none: the default TLS 1.2 suites, as Go.
    if suites.is_empty() && !caveats.is_empty() {
        return Err(format!(
            "--tls-cipher-suites names no TLS 1.2 suite that inpool's TLS (rustls) implements; \
             it implements {}",
            TLS12_SUITES
                .iter()
                .filter(|(go, suite)| suite.is_some() && !go.ends_with("POLY1305"))
                .map(|(go, _)| *go)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok((suites, caveats))
}

/// Parses `--tls-curve-preferences` (Go's numeric `CurveID`s).
pub fn parse_curves(ids: &[String]) -> Result<(Vec<NamedGroup>, Vec<Caveat>), String> {
    let mut groups = Vec::new();
    let mut caveats = Vec::new();
    for id in ids.iter().map(|i| i.trim()).filter(|i| !i.is_empty()) {
        let group = match id {
            "23" => Some(NamedGroup::secp256r1),
            "24" => Some(NamedGroup::secp384r1),
            "29" => Some(NamedGroup::X25519),
            "25" | "4588" => None,
            other => {
                return Err(format!(
                    "`{other}` is not a curve ID of Go's crypto/tls: use 23 (P-256), 24 (P-384), \
                     29 (X25519), 25 (P-521) or 4588 (X25519MLKEM768)"
                ));
            }
        };
        match group {
            Some(group) if !groups.contains(&group) => groups.push(group),
            Some(_) => {}
            None => caveats.push(format!(
                "--tls-curve-preferences: curve {id} is not implemented by inpool's TLS (rustls \
                 on ring) and is not offered"
            )),
        }
    }
    if groups.is_empty() && !caveats.is_empty() {
        return Err(
            "--tls-curve-preferences names no curve that inpool's TLS implements: use 23 \
             (P-256), 24 (P-384) or 29 (X25519)"
                .to_string(),
        );
    }
    Ok((groups, caveats))
}

impl TlsPolicy {
    /// The crypto provider restricted to the policy's suites and groups.
    fn provider(&self) -> CryptoProvider {
        let mut provider = provider::default_provider();
        if !self.cipher_suites.is_empty() {
            provider.cipher_suites.retain(|suite| {
                suite.tls13().is_some() || self.cipher_suites.contains(&suite.suite())
            });
        }
        if !self.groups.is_empty() {
            provider
                .kx_groups
                .retain(|group| self.groups.contains(&group.name()));
        }
        provider
    }

    fn versions(&self) -> &'static [&'static SupportedProtocolVersion] {
        match self.min_version {
            MinVersion::Tls12 => rustls::ALL_VERSIONS,
            MinVersion::Tls13 => TLS13_ONLY,
        }
    }

    /// A server configuration for the PEM certificate (chain) and key, offering only HTTP/1.1
    /// (ALPN).
    pub fn server_config(&self, cert_pem: &[u8], key_pem: &[u8]) -> anyhow::Result<ServerConfig> {
        let certs = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| anyhow::anyhow!("reading the certificate PEM: {e}"))?;
        if certs.is_empty() {
            anyhow::bail!("the certificate PEM holds no certificate");
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem)
            .map_err(|e| anyhow::anyhow!("reading the private key PEM: {e}"))?;
        let mut config = ServerConfig::builder_with_provider(Arc::new(self.provider()))
            .with_protocol_versions(self.versions())?
            .with_no_client_auth()
            .with_single_cert(certs, key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::diagnostics::self_signed_pem;
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::pki_types::{ServerName, UnixTime};
    use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, ServerConnection};

    /// Accepts any certificate: the tests are about what the server offers, not about trust.
    #[derive(Debug)]
    struct AnyCertificate;

    impl ServerCertVerifier for AnyCertificate {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            Ok(ServerCertVerified::assertion())
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(
                message,
                cert,
                dss,
                &provider::default_provider().signature_verification_algorithms,
            )
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(
                message,
                cert,
                dss,
                &provider::default_provider().signature_verification_algorithms,
            )
        }

        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            provider::default_provider()
                .signature_verification_algorithms
                .supported_schemes()
        }
    }

    /// A client offering only `version`, and (if given) only `suite` and `group`.
    fn client(
        version: &'static SupportedProtocolVersion,
        suite: Option<CipherSuite>,
        group: Option<NamedGroup>,
    ) -> ClientConfig {
        let mut offered = provider::default_provider();
        if let Some(suite) = suite {
            offered.cipher_suites.retain(|s| s.suite() == suite);
        }
        if let Some(group) = group {
            offered.kx_groups.retain(|g| g.name() == group);
        }
        ClientConfig::builder_with_provider(Arc::new(offered))
            .with_protocol_versions(&[version])
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate))
            .with_no_client_auth()
    }

    /// Runs a handshake in memory between `client` and a server under `policy`: the suite
    /// agreed, or the error.
    fn handshake(policy: &TlsPolicy, client: ClientConfig) -> Result<CipherSuite, String> {
        let (cert, key) = self_signed_pem().unwrap();
        let server = policy
            .server_config(cert.as_bytes(), key.as_bytes())
            .unwrap();
        let mut server = ServerConnection::new(Arc::new(server)).unwrap();
        let mut client =
            ClientConnection::new(Arc::new(client), "localhost".try_into().unwrap()).unwrap();
        for _ in 0..10 {
            let mut wire = Vec::new();
            client.write_tls(&mut wire).unwrap();
            server
                .read_tls(&mut wire.as_slice())
                .map_err(|e| e.to_string())?;
            server.process_new_packets().map_err(|e| e.to_string())?;
            let mut wire = Vec::new();
            server.write_tls(&mut wire).unwrap();
            client
                .read_tls(&mut wire.as_slice())
                .map_err(|e| e.to_string())?;
            client.process_new_packets().map_err(|e| e.to_string())?;
            if !client.is_handshaking() && !server.is_handshaking() {
                return Ok(server.negotiated_cipher_suite().unwrap().suite());
            }
        }
        Err("the handshake did not finish".into())
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_default_offers_tls_1_2_and_1_3() {
        let policy = TlsPolicy::default();
        assert!(handshake(&policy, client(&rustls::version::TLS12, None, None)).is_ok());
        assert!(handshake(&policy, client(&rustls::version::TLS13, None, None)).is_ok());
    }

    #[test]
    fn tls_1_3_as_minimum_refuses_a_tls_1_2_client() {
        let (min_version, caveat) = parse_min_version("VersionTLS13").unwrap();
        assert_eq!(caveat, None);
        let policy = TlsPolicy {
            min_version,
            ..TlsPolicy::default()
        };
        assert!(handshake(&policy, client(&rustls::version::TLS12, None, None)).is_err());
        assert!(handshake(&policy, client(&rustls::version::TLS13, None, None)).is_ok());
    }

    #[test]
    fn the_cipher_suites_pick_the_tls_1_2_suites() {
        let (cipher_suites, caveats) = parse_cipher_suites(&strings(&[
            "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
            "TLS_RSA_WITH_AES_128_CBC_SHA",
            "TLS_AES_128_GCM_SHA256",
        ]))
        .unwrap();
        assert_eq!(
            cipher_suites,
            [CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384]
        );
        assert_eq!(caveats.len(), 1, "{caveats:?}");
        assert!(caveats[0].contains("TLS_RSA_WITH_AES_128_CBC_SHA"));
        let policy = TlsPolicy {
            cipher_suites,
            ..TlsPolicy::default()
        };
        let tls12 = &rustls::version::TLS12;
        assert_eq!(
            handshake(
                &policy,
                client(
                    tls12,
                    Some(CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384),
                    None
                )
            ),
            Ok(CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384)
        );
        assert!(
            handshake(
                &policy,
                client(
                    tls12,
                    Some(CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256),
                    None
                )
            )
            .is_err()
        );
        // TLS 1.3 suites are not configurable, as in Go.
        assert!(
            handshake(
                &policy,
                client(
                    &rustls::version::TLS13,
                    Some(CipherSuite::TLS13_CHACHA20_POLY1305_SHA256),
                    None
                )
            )
            .is_ok()
        );
    }

    #[test]
    fn cipher_suite_names_are_go_names() {
        assert!(
            parse_cipher_suites(&strings(&["TLS_MADE_UP"]))
                .unwrap_err()
                .contains("TLS_MADE_UP")
        );
        let error = parse_cipher_suites(&strings(&["TLS_RSA_WITH_RC4_128_SHA"])).unwrap_err();
        assert!(
            error.contains("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
            "{error}"
        );
        assert_eq!(
            parse_cipher_suites(&strings(&["TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305"])),
            Ok((
                vec![CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256],
                vec![]
            ))
        );
    }

    #[test]
    fn the_curves_pick_the_key_exchange_groups() {
        let (groups, caveats) = parse_curves(&strings(&["29", "25"])).unwrap();
        assert_eq!(groups, [NamedGroup::X25519]);
        assert_eq!(caveats.len(), 1);
        let policy = TlsPolicy {
            groups,
            ..TlsPolicy::default()
        };
        let tls13 = &rustls::version::TLS13;
        assert!(handshake(&policy, client(tls13, None, Some(NamedGroup::X25519))).is_ok());
        assert!(handshake(&policy, client(tls13, None, Some(NamedGroup::secp256r1))).is_err());
        assert!(parse_curves(&strings(&["7"])).is_err());
        assert!(parse_curves(&strings(&["25"])).is_err());
    }

    #[test]
    fn old_minimum_versions_mean_tls_1_2() {
        let (version, caveat) = parse_min_version("VersionTLS10").unwrap();
        assert_eq!(version, MinVersion::Tls12);
        assert!(caveat.unwrap().contains("VersionTLS10"));
        assert!(parse_min_version("TLS1.2").is_err());
    }
}
