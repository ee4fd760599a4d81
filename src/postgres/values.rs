//! The statements of a guarded transaction and what they return, in zklock's own types: a
//! value is bound to a parameter as the type the server infers for it, and a column is read by
//! its type.

use tokio_postgres::types::{ToSql, Type};

use crate::core::error::{Error, Result};
use crate::core::statement::first_word;

/// A value bound to a parameter of a [`PgStatement`], or read from a column of its rows.
///
/// A parameter's type is the one the server infers for it: [`Int`](PgValue::Int) binds to
/// `int2`, `int4`, `int8`, `float4`, `float8` (and `text`, as its decimal digits),
/// [`Float`](PgValue::Float) to `float4` or `float8`, [`Text`](PgValue::Text) to `text`,
/// `varchar`, `char` or `name`, [`Bytes`](PgValue::Bytes) to `bytea`, [`Bool`](PgValue::Bool)
/// to `bool`, [`Null`](PgValue::Null) to any. For another type, cast in the SQL (`$1::text`
/// binds text, which the server then casts: `WHERE id = $1::text::uuid`). A column is read as
/// the variant of its type; a column of another type fails the transaction: select it cast to
/// `text`.
///
/// # Example
/// ```
/// use zklock::postgres::PgValue;
///
/// assert_eq!(PgValue::from(7), PgValue::Int(7));
/// assert_eq!(PgValue::from("ledger"), PgValue::Text("ledger".into()));
/// assert_eq!(PgValue::from(None::<i64>), PgValue::Null);
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum PgValue {
    /// SQL `NULL`.
    Null,
    /// `bool`.
    Bool(bool),
    /// `int2`, `int4` or `int8`.
    Int(i64),
    /// `float4` or `float8`.
    Float(f64),
    /// `text`, `varchar`, `char` or `name`.
    Text(String),
    /// `bytea`.
    Bytes(Vec<u8>),
}

impl From<bool> for PgValue {
    fn from(v: bool) -> Self {
        PgValue::Bool(v)
    }
}

crate::core::statement::sql_value_from!(PgValue);

crate::core::statement::sql_statement! {
    /// One statement of a guarded transaction: SQL with parameters `$1`, `$2`, … and their values.
    ///
    /// # Example
    /// ```
    /// use zklock::postgres::PgStatement;
    ///
    /// let update = PgStatement::new("UPDATE account SET balance = balance + $1 WHERE id = $2")
    ///     .bind(100)
    ///     .bind("acct-7");
    /// assert_eq!(update.params().len(), 2);
    /// ```
    pub struct PgStatement(PgValue) {
        bind: "Binds the next parameter (`$1` first).",
        params: "The values bound, `$1` first.",
    }

    /// What one statement of a guarded transaction returned: its rows (none for a statement
    /// that returns none, such as an `UPDATE` without `RETURNING`) and how many rows it affected.
    ///
    /// # Example
    /// ```no_run
    /// use zklock::postgres::{PgMutex, PgStatement, PgValue};
    ///
    /// # fn main() -> zklock::Result<()> {
    /// let client = zklock::PgClient::connect("postgres://app@127.0.0.1/app")?;
    /// let mutex = PgMutex::new(&client, "ledger")?;
    /// let guard = mutex.lock()?;
    /// let answers = guard.guarded_transaction(&[PgStatement::new(
    ///     "UPDATE account SET balance = balance - 5 WHERE id = 7 RETURNING balance",
    /// )])?;
    /// assert_eq!(answers[0].affected(), 1);
    /// if let [PgValue::Int(balance)] = answers[0].rows()[0].as_slice() {
    ///     println!("balance now {balance}");
    /// }
    /// # Ok(()) }
    /// ```
    pub struct PgRows;
}

impl PgStatement {
    /// [`Error::InvalidArgument`] for SQL that is empty or holds a NUL character, or a text
    /// value that holds one (PostgreSQL's text cannot).
    pub(crate) fn check(&self) -> Result<()> {
        if self.sql.trim().is_empty() {
            return Err(Error::invalid(
                "a guarded statement's SQL must not be empty",
            ));
        }
        if self.sql.contains('\0') {
            return Err(Error::invalid(
                "a guarded statement's SQL cannot contain NUL",
            ));
        }
        if ends_transaction(&self.sql) {
            return Err(Error::invalid(format!(
                "a guarded statement cannot begin or end a transaction ({}): the guard's \
                 transaction is what commits",
                self.shown()
            )));
        }
        if self
            .params
            .iter()
            .any(|p| matches!(p, PgValue::Text(t) if t.contains('\0')))
        {
            return Err(Error::invalid(
                "a guarded statement's text value cannot contain NUL (PostgreSQL's text \
                 cannot hold it)",
            ));
        }
        Ok(())
    }
}

/// Whether `sql`'s first word (after blanks and comments) begins, ends or splits a
/// transaction.
fn ends_transaction(sql: &str) -> bool {
    let word = first_word(sql, &["--"]);
    matches!(
        word.as_str(),
        "BEGIN"
            | "START"
            | "COMMIT"
            | "END"
            | "ROLLBACK"
            | "ABORT"
            | "PREPARE"
            | "SAVEPOINT"
            | "RELEASE"
    )
}

/// `value` as a parameter of type `ty`, or why it cannot be.
pub(crate) fn param(
    value: &PgValue,
    ty: &Type,
) -> std::result::Result<Box<dyn ToSql + Sync + Send>, String> {
    let cannot = || {
        format!(
            "{value:?} cannot be bound to a parameter of type {ty}: cast the parameter in the \
             SQL (`$n::text`)"
        )
    };
    let range = |v: i64| format!("{v} is out of range for a parameter of type {ty}");
    Ok(match (value, ty) {
        (PgValue::Null, _) => null(ty).ok_or_else(cannot)?,
        (PgValue::Bool(b), &Type::BOOL) => Box::new(*b),
        (PgValue::Int(v), &Type::INT2) => Box::new(i16::try_from(*v).map_err(|_| range(*v))?),
        (PgValue::Int(v), &Type::INT4) => Box::new(i32::try_from(*v).map_err(|_| range(*v))?),
        (PgValue::Int(v), &Type::INT8) => Box::new(*v),
        #[allow(clippy::cast_precision_loss)]
        (PgValue::Int(v), &Type::FLOAT4) => Box::new(*v as f32),
        #[allow(clippy::cast_precision_loss)]
        (PgValue::Int(v), &Type::FLOAT8) => Box::new(*v as f64),
        (PgValue::Int(v), t) if text(t) => Box::new(v.to_string()),
        #[allow(clippy::cast_possible_truncation)]
        (PgValue::Float(v), &Type::FLOAT4) => Box::new(*v as f32),
        (PgValue::Float(v), &Type::FLOAT8) => Box::new(*v),
        (PgValue::Text(s), t) if text(t) => Box::new(s.clone()),
        (PgValue::Bytes(b), &Type::BYTEA) => Box::new(b.clone()),
        _ => return Err(cannot()),
    })
}

/// SQL `NULL` as a parameter of type `ty`, for the types a value binds to.
fn null(ty: &Type) -> Option<Box<dyn ToSql + Sync + Send>> {
    Some(match *ty {
        Type::BOOL => Box::new(None::<bool>),
        Type::INT2 => Box::new(None::<i16>),
        Type::INT4 => Box::new(None::<i32>),
        Type::INT8 => Box::new(None::<i64>),
        Type::FLOAT4 => Box::new(None::<f32>),
        Type::FLOAT8 => Box::new(None::<f64>),
        Type::BYTEA => Box::new(None::<Vec<u8>>),
        ref t if text(t) => Box::new(None::<String>),
        _ => return None,
    })
}

/// The types a Rust `String` binds to and is read from.
fn text(ty: &Type) -> bool {
    matches!(
        *ty,
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN
    )
}

/// Row `row`'s values, each read by its column's type.
pub(crate) fn values(row: &tokio_postgres::Row) -> std::result::Result<Vec<PgValue>, String> {
    (0..row.len()).map(|i| value(row, i)).collect()
}

fn value(row: &tokio_postgres::Row, i: usize) -> std::result::Result<PgValue, String> {
    let ty = row.columns()[i].type_().clone();
    let bad = |e: tokio_postgres::Error| format!("column {i} of type {ty}: {e}");
    let read = match ty {
        Type::BOOL => row
            .try_get::<_, Option<bool>>(i)
            .map(|v| v.map(PgValue::Bool)),
        Type::INT2 => row
            .try_get::<_, Option<i16>>(i)
            .map(|v| v.map(|v| PgValue::Int(v.into()))),
        Type::INT4 => row
            .try_get::<_, Option<i32>>(i)
            .map(|v| v.map(|v| PgValue::Int(v.into()))),
        Type::INT8 => row
            .try_get::<_, Option<i64>>(i)
            .map(|v| v.map(PgValue::Int)),
        Type::FLOAT4 => row
            .try_get::<_, Option<f32>>(i)
            .map(|v| v.map(|v| PgValue::Float(v.into()))),
        Type::FLOAT8 => row
            .try_get::<_, Option<f64>>(i)
            .map(|v| v.map(PgValue::Float)),
        Type::BYTEA => row
            .try_get::<_, Option<Vec<u8>>>(i)
            .map(|v| v.map(PgValue::Bytes)),
        ref t if text(t) => row
            .try_get::<_, Option<String>>(i)
            .map(|v| v.map(PgValue::Text)),
        _ => {
            return Err(format!(
                "column {i} is of type {ty}, which a guarded statement does not read: select it \
                 cast to text (`{}::text`)",
                row.columns()[i].name()
            ))
        }
    };
    Ok(read.map_err(bad)?.unwrap_or(PgValue::Null))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_bind_to_the_types_they_fit() {
        assert!(param(&PgValue::Int(7), &Type::INT4).is_ok());
        assert!(param(&PgValue::Int(i64::MAX), &Type::INT4)
            .unwrap_err()
            .contains("out of range"));
        assert!(param(&PgValue::Int(7), &Type::TEXT).is_ok());
        assert!(param(&PgValue::Text("x".into()), &Type::INT4)
            .unwrap_err()
            .contains("$n::text"));
        assert!(param(&PgValue::Null, &Type::UUID).is_err());
        assert!(param(&PgValue::Null, &Type::INT8).is_ok());
        assert!(param(&PgValue::Float(f64::NAN), &Type::FLOAT8).is_ok());
    }

    #[test]
    fn statements_are_checked_before_any_io() {
        assert!(PgStatement::new("").check().is_err());
        assert!(PgStatement::new("  ").check().is_err());
        assert!(PgStatement::new("SELECT 1\0").check().is_err());
        assert!(PgStatement::new("SELECT $1").bind("a\0b").check().is_err());
        assert!(PgStatement::new("SELECT $1").bind(1).check().is_ok());
        assert!(PgStatement::new(" -- x\n /* y */ commit").check().is_err());
        assert!(PgStatement::new("ROLLBACK").check().is_err());
        assert!(PgStatement::new("UPDATE t SET committed = true")
            .check()
            .is_ok());
        let long = PgStatement::new("x".repeat(500)).shown();
        assert_eq!(long.chars().count(), 121);
    }
}
