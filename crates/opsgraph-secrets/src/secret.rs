use std::fmt;

use zeroize::Zeroizing;

/// Secret bytes: a kubeconfig, a join token, a password.
///
/// The buffer (its whole capacity) is zeroed on drop. `Debug` and `Display` print
/// `Secret(**redacted**, N bytes)`; there is deliberately no `Serialize`, `AsRef` or `Deref`, so a
/// secret reaches a log line, a JSON response or a format string only through [`Secret::expose`].
#[derive(Clone, Default)]
pub struct Secret(Zeroizing<Vec<u8>>);

impl Secret {
    pub fn new(bytes: Vec<u8>) -> Secret {
        Secret(Zeroizing::new(bytes))
    }

    /// The value. Every call site is a place where the secret leaves this type: keep them few.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }

    /// The value as text, when it is UTF-8.
    pub fn expose_str(&self) -> Result<&str, std::str::Utf8Error> {
        std::str::from_utf8(&self.0)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<Vec<u8>> for Secret {
    fn from(bytes: Vec<u8>) -> Secret {
        Secret::new(bytes)
    }
}

impl From<String> for Secret {
    fn from(text: String) -> Secret {
        Secret::new(text.into_bytes())
    }
}

impl From<&str> for Secret {
    fn from(text: &str) -> Secret {
        Secret::new(text.as_bytes().to_vec())
    }
}

impl From<&[u8]> for Secret {
    fn from(bytes: &[u8]) -> Secret {
        Secret::new(bytes.to_vec())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret(**redacted**, {} bytes)", self.0.len())
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}
