//! Masking secret values in what a job shows: its output, its evidence, its failure.

use opsgraph_core::model::Evidence;
use opsgraph_exec::EvidenceResult;

/// Evidence results and their failure with `values` masked.
pub(crate) fn masked(
    values: Vec<Vec<u8>>,
    checks: Vec<(Evidence, EvidenceResult)>,
    failure: Option<String>,
) -> (Vec<(Evidence, EvidenceResult)>, Option<String>) {
    let m = Masking::new(values);
    let failure = failure.map(|f| m.text(&f));
    (m.evidence(checks), failure)
}

/// Masks secret values in what a job shows. When the masker cannot be built, output is
/// withheld rather than shown unmasked (fail closed).
pub(crate) enum Masking {
    None,
    Mask(opsgraph_secrets::Masker),
    Withhold,
}

impl Masking {
    pub(crate) fn new(values: Vec<Vec<u8>>) -> Masking {
        if values.is_empty() {
            return Masking::None;
        }
        match opsgraph_secrets::Masker::new(values) {
            Ok(m) => Masking::Mask(m),
            Err(_) => Masking::Withhold,
        }
    }

    pub(crate) fn bytes(&self, b: &[u8]) -> Vec<u8> {
        match self {
            Masking::None => b.to_vec(),
            Masking::Mask(m) => m.mask_bytes(b),
            Masking::Withhold if b.is_empty() => Vec::new(),
            Masking::Withhold => b"(output withheld: secrets could not be masked)\n".to_vec(),
        }
    }

    pub(crate) fn text(&self, t: &str) -> String {
        String::from_utf8_lossy(&self.bytes(t.as_bytes())).into_owned()
    }

    pub(crate) fn evidence(&self, checks: Vec<(Evidence, EvidenceResult)>) -> Vec<(Evidence, EvidenceResult)> {
        if matches!(self, Masking::None) {
            return checks;
        }
        checks
            .into_iter()
            .map(|(e, mut r)| {
                r.observed = self.text(&r.observed);
                r.expected = self.text(&r.expected);
                r.detail = self.text(&r.detail);
                for v in r.captured.values_mut() {
                    *v = self.text(v);
                }
                (e, r)
            })
            .collect()
    }
}
