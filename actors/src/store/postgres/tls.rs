//! TLS to the shared store, as libpq's `sslmode` and `sslrootcert` ask:
//! `disable` never, `prefer` (the default) when the server offers it,
//! `require` always; the server's certificate is checked against
//! `sslrootcert` when one is named (as libpq does), and with `verify-ca`
//! (the chain) or `verify-full` (the chain and the host name) against it
//! or the well-known roots. tokio-postgres knows neither `sslrootcert` nor
//! the `verify-*` modes, so they are taken out of the URL here. Without
//! the `tls` feature only `disable` and `prefer` connect (in plain TCP).

use super::PgError;
use std::path::PathBuf;

/// What the URL asks of TLS.
#[derive(Debug, Clone, PartialEq)]
pub struct Wanted {
    pub mode: Mode,
    pub root: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl Mode {
    fn parse(v: &str) -> Option<Mode> {
        Some(match v {
            "disable" => Mode::Disable,
            "prefer" | "allow" => Mode::Prefer,
            "require" => Mode::Require,
            "verify-ca" => Mode::VerifyCa,
            "verify-full" => Mode::VerifyFull,
            _ => return None,
        })
    }

    /// What tokio-postgres is told.
    fn as_tokio(self) -> &'static str {
        match self {
            Mode::Disable => "disable",
            Mode::Prefer => "prefer",
            Mode::Require | Mode::VerifyCa | Mode::VerifyFull => "require",
        }
    }
}

/// Splits the TLS settings off `url` (URL or key=value form): the URL
/// tokio-postgres can parse, and what was asked.
pub fn split(url: &str) -> Result<(String, Wanted), PgError> {
    let mut wanted = Wanted {
        mode: Mode::Prefer,
        root: None,
    };
    let mut take = |key: &str, value: &str| -> Result<bool, PgError> {
        match key {
            "sslmode" => {
                wanted.mode = Mode::parse(value).ok_or_else(|| {
                    PgError::Url(format!(
                        "sslmode={value} is not one of disable, prefer, require, verify-ca, verify-full"
                    ))
                })?;
                Ok(true)
            }
            "sslrootcert" => {
                wanted.root = Some(PathBuf::from(value));
                Ok(true)
            }
            _ => Ok(false),
        }
    };
    let rest = if let Some((base, query)) = url
        .split_once('?')
        .filter(|_| url.starts_with("postgres://") || url.starts_with("postgresql://"))
    {
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            if !take(k, &percent_decode(v))? {
                kept.push(pair.to_string());
            }
        }
        kept.push(format!("sslmode={}", wanted.mode.as_tokio()));
        format!("{base}?{}", kept.join("&"))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        format!("{url}?sslmode={}", wanted.mode.as_tokio())
    } else {
        let mut kept = Vec::new();
        for token in url.split_whitespace() {
            let (k, v) = token.split_once('=').unwrap_or((token, ""));
            if !take(k, v)? {
                kept.push(token.to_string());
            }
        }
        kept.push(format!("sslmode={}", wanted.mode.as_tokio()));
        kept.join(" ")
    };
    Ok((rest, wanted))
}

fn percent_decode(v: &str) -> String {
    let bytes = v.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&v[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(feature = "tls")]
pub use with_tls::{Connector, connector};

#[cfg(not(feature = "tls"))]
pub type Connector = tokio_postgres::NoTls;

/// Without TLS support: plain TCP, and a clear refusal when TLS is a must.
#[cfg(not(feature = "tls"))]
pub fn connector(wanted: &Wanted) -> Result<Connector, PgError> {
    if wanted.mode != Mode::Disable && wanted.mode != Mode::Prefer || wanted.root.is_some() {
        return Err(PgError::Url(
            "the URL asks for TLS (sslmode or sslrootcert), but this flytod was built without the `tls` feature: build it with `--features tls`, or use sslmode=disable".into(),
        ));
    }
    Ok(tokio_postgres::NoTls)
}

#[cfg(feature = "tls")]
mod with_tls {
    use super::{Mode, PgError, Wanted};
    use rustls::client::WebPkiServerVerifier;
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{CertificateError, DigitallySignedStruct, Error, RootCertStore, SignatureScheme};
    use std::sync::Arc;

    pub type Connector = tokio_postgres_rustls::MakeRustlsConnect;

    /// The TLS connector for what the URL asked.
    pub fn connector(wanted: &Wanted) -> Result<Connector, PgError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        match &wanted.root {
            Some(path) => {
                let certs = CertificateDer::pem_file_iter(path)
                    .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| {
                        PgError::Url(format!(
                            "sslrootcert={}: cannot read certificates from it ({e}): name a PEM file of the CA that signed the server's certificate",
                            path.display()
                        ))
                    })?;
                if certs.is_empty() {
                    return Err(PgError::Url(format!(
                        "sslrootcert={}: the file holds no PEM certificate",
                        path.display()
                    )));
                }
                for c in certs {
                    roots.add(c).map_err(|e| {
                        PgError::Url(format!("sslrootcert={}: {e}", path.display()))
                    })?;
                }
            }
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| PgError::Url(format!("cannot set up certificate checks: {e}")))?;
        // As libpq: a named root makes `require` check the chain.
        let check = match wanted.mode {
            Mode::VerifyFull => Check::Full,
            Mode::VerifyCa => Check::Chain,
            _ if wanted.root.is_some() => Check::Chain,
            _ => Check::None,
        };
        let verifier = Arc::new(Verifier {
            webpki,
            check,
            provider: provider.clone(),
        });
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| PgError::Url(format!("cannot set up TLS: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
    }

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Check {
        /// `prefer`/`require` without a root: encrypted, not authenticated.
        None,
        /// `verify-ca`: signed by a trusted root.
        Chain,
        /// `verify-full`: and issued for the host connected to.
        Full,
    }

    #[derive(Debug)]
    struct Verifier {
        webpki: Arc<WebPkiServerVerifier>,
        check: Check,
        provider: Arc<rustls::crypto::CryptoProvider>,
    }

    impl ServerCertVerifier for Verifier {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            intermediates: &[CertificateDer<'_>],
            server_name: &ServerName<'_>,
            ocsp_response: &[u8],
            now: UnixTime,
        ) -> Result<ServerCertVerified, Error> {
            if self.check == Check::None {
                return Ok(ServerCertVerified::assertion());
            }
            match self.webpki.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            ) {
                Err(Error::InvalidCertificate(
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. },
                )) if self.check == Check::Chain => Ok(ServerCertVerified::assertion()),
                other => other,
            }
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            rustls::crypto::verify_tls12_signature(
                message,
                cert,
                dss,
                &self.provider.signature_verification_algorithms,
            )
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            rustls::crypto::verify_tls13_signature(
                message,
                cert,
                dss,
                &self.provider.signature_verification_algorithms,
            )
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.provider
                .signature_verification_algorithms
                .supported_schemes()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_keeps_what_tokio_postgres_knows_and_hands_over_the_rest() {
        let (url, w) = split(
            "postgres://u@db:5433/f?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&application_name=x",
        )
        .unwrap();
        assert_eq!(
            url,
            "postgres://u@db:5433/f?application_name=x&sslmode=require"
        );
        assert_eq!(w.mode, Mode::VerifyFull);
        assert_eq!(w.root, Some(PathBuf::from("/etc/ca.pem")));
        let (url, w) = split("postgres://u@db/f").unwrap();
        assert_eq!(url, "postgres://u@db/f?sslmode=prefer");
        assert_eq!((w.mode, w.root), (Mode::Prefer, None));
        let (url, w) = split("host=db user=u sslmode=disable sslrootcert=/ca.pem").unwrap();
        assert_eq!(url, "host=db user=u sslmode=disable");
        assert_eq!(w.mode, Mode::Disable);
        assert!(split("postgres://u@db/f?sslmode=sometimes").is_err());
    }
}
