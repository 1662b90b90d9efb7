//! `opsgraph plan` and `opsgraph demo`.

use std::io::Write;

use crate::cli::PlanArgs;

pub fn plan(_args: &PlanArgs, _out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<u8> {
    writeln!(err, "not yet")?;
    Ok(2)
}

pub fn demo(_out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<u8> {
    writeln!(err, "not yet")?;
    Ok(2)
}
