//! Identifier rules shared by every document kind (documents.md, "General rules").

/// An id: lowercase `[a-z0-9][a-z0-9._-]*`.
pub fn is_id(s: &str) -> bool {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) if c.is_ascii_lowercase() || c.is_ascii_digit() => {}
        _ => return false,
    }
    chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'))
}

/// A capability key: dotted ids, each segment an id without dots (`object_storage.s3`).
pub fn is_capability_key(s: &str) -> bool {
    !s.is_empty() && s.split('.').all(|seg| is_id(seg) && !seg.contains('.'))
}

/// A resource id: `<type>/<name>`, both ids.
pub fn is_resource_id(s: &str) -> bool {
    match s.split_once('/') {
        Some((ty, name)) => is_id(ty) && is_id(name),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        for ok in ["a", "install-runtime", "node_inventory", "tempo.install", "1.30", "x-1_2.3"] {
            assert!(is_id(ok), "{ok}");
        }
        for bad in ["", "A", "-a", ".a", "a b", "a/b", "Über", "_x"] {
            assert!(!is_id(bad), "{bad}");
        }
        assert!(is_capability_key("object_storage.s3"));
        assert!(!is_capability_key("object_storage..s3"));
        assert!(!is_capability_key("Object.s3"));
        assert!(is_resource_id("compute_node/worker-3"));
        assert!(!is_resource_id("worker-3"));
        assert!(!is_resource_id("a/b/c"));
    }
}
