//! Reading rows into records: one function a record reads its row and parses its JSON columns
//! in one go, failing with the crate's `Fail` (a rusqlite row closure may only fail with
//! rusqlite's errors).

use rusqlite::{Connection, Params, Row};
use serde::de::DeserializeOwned;

use crate::Fail;

/// A record's reader: its fields from a row, JSON columns parsed ([`parsed`]).
pub(crate) type Reader<T> = fn(&Row<'_>) -> Result<T, Fail>;

/// The rows of `sql`, each read by `read`.
pub(crate) fn rows<T>(conn: &Connection, sql: &str, args: impl Params, read: Reader<T>) -> Result<Vec<T>, Fail> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt.query(args)?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        out.push(read(r)?);
    }
    Ok(out)
}

/// The first row of `sql`, if any, read by `read` (as [`rows`]).
pub(crate) fn first<T>(conn: &Connection, sql: &str, args: impl Params, read: Reader<T>) -> Result<Option<T>, Fail> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt.query(args)?;
    rows.next()?.map(read).transpose()
}

/// Column `i`, JSON text, parsed.
pub(crate) fn parsed<T: DeserializeOwned>(r: &Row<'_>, i: usize) -> Result<T, Fail> {
    Ok(serde_json::from_str(&r.get::<_, String>(i)?)?)
}
