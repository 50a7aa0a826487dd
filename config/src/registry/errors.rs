//! What registry validation reports: every problem, located.

use std::fmt;

/// One problem, located: file, document (`Kind/name`) and field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryError {
    pub source: String,
    pub document: String,
    pub field: String,
    pub problem: String,
}

impl fmt::Display for RegistryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}: {}: {}",
            self.source, self.document, self.field, self.problem
        )
    }
}

/// Every problem found; a registry is accepted only with none.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct RegistryErrors(pub Vec<RegistryError>);

impl fmt::Display for RegistryErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "registry rejected ({} problem(s)):", self.0.len())?;
        for e in &self.0 {
            writeln!(f, "  {e}")?;
        }
        Ok(())
    }
}
