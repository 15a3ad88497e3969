//! The lab's TLS: one self-signed certificate made at run time (rcgen),
//! the server presenting it and the clients trusting only it. No file,
//! no system trust store; rustls with the `ring` provider.

use std::sync::Arc;

use quinn::rustls::RootCertStore;
use quinn::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::QuicError;

/// The name the certificate is issued for and the clients ask for.
pub const SERVER_NAME: &str = "px-quic.lab";

/// A server and a client configuration that trust each other (transport
/// settings still at quinn's defaults).
#[derive(Debug, Clone)]
pub struct Tls {
    /// For the server endpoint.
    pub server: quinn::ServerConfig,
    /// For every client endpoint.
    pub client: quinn::ClientConfig,
}

impl Tls {
    /// Makes the certificate and both configurations.
    pub fn self_signed() -> Result<Tls, QuicError> {
        let tls = |e: &dyn std::fmt::Display| QuicError::Tls(e.to_string());
        let ck = rcgen::generate_simple_self_signed(vec![SERVER_NAME.to_owned()]).map_err(|e| tls(&e))?;
        let cert = ck.cert.der().clone();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der()));
        let server = quinn::ServerConfig::with_single_cert(vec![cert.clone()], key).map_err(|e| tls(&e))?;
        let mut roots = RootCertStore::empty();
        roots.add(cert).map_err(|e| tls(&e))?;
        let client = quinn::ClientConfig::with_root_certificates(Arc::new(roots)).map_err(|e| tls(&e))?;
        Ok(Tls { server, client })
    }
}
