//! The statements of a guarded transaction and what they return, in zklock's own types, sent
//! as prepared statements (the binary protocol: numbers stay numbers).

use crate::core::error::{Error, Result};
use crate::core::statement::first_word;

/// A value bound to a `?` of a [`MySqlStatement`], or read from a column of its rows.
///
/// A column is read as the variant of the value the server sends: integers as
/// [`Int`](MySqlValue::Int) (an unsigned one above `i64::MAX` as its decimal
/// [`Text`](MySqlValue::Text)), `FLOAT` and `DOUBLE` as [`Float`](MySqlValue::Float), strings
/// (and `DECIMAL`) as [`Text`](MySqlValue::Text) when they are UTF-8, else as
/// [`Bytes`](MySqlValue::Bytes), dates and times as their SQL text. A boolean is an integer in
/// MySQL: bind `Int(0)` or `Int(1)`.
///
/// # Example
/// ```
/// use zklock::mysql::MySqlValue;
///
/// assert_eq!(MySqlValue::from(7), MySqlValue::Int(7));
/// assert_eq!(MySqlValue::from("ledger"), MySqlValue::Text("ledger".into()));
/// assert_eq!(MySqlValue::from(None::<i64>), MySqlValue::Null);
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum MySqlValue {
    /// SQL `NULL`.
    Null,
    /// An integer.
    Int(i64),
    /// `FLOAT` or `DOUBLE`.
    Float(f64),
    /// A string (UTF-8).
    Text(String),
    /// Bytes (`BLOB`, `BINARY`, a string that is not UTF-8).
    Bytes(Vec<u8>),
}

crate::core::statement::sql_value_from!(MySqlValue);

crate::core::statement::sql_statement! {
    /// One statement of a guarded transaction: SQL with `?` parameters and their values.
    ///
    /// # Example
    /// ```
    /// use zklock::mysql::MySqlStatement;
    ///
    /// let update = MySqlStatement::new("UPDATE account SET balance = balance + ? WHERE id = ?")
    ///     .bind(100)
    ///     .bind("acct-7");
    /// assert_eq!(update.params().len(), 2);
    /// ```
    pub struct MySqlStatement(MySqlValue) {
        bind: "Binds the next `?`.",
        params: "The values bound, the first `?`'s first.",
    }

    /// What one statement of a guarded transaction returned: its rows (none for a statement that
    /// returns none) and how many rows it affected (for a `SELECT`, how many it returned).
    ///
    /// # Example
    /// ```no_run
    /// use zklock::mysql::{MySqlMutex, MySqlStatement, MySqlValue};
    ///
    /// # fn main() -> zklock::Result<()> {
    /// let client = zklock::MySqlClient::connect("mysql://app@127.0.0.1/app")?;
    /// let mutex = MySqlMutex::new(&client, "ledger")?;
    /// let guard = mutex.lock()?;
    /// let answers = guard.guarded_transaction(&[
    ///     MySqlStatement::new("UPDATE account SET balance = balance - 5 WHERE id = 7"),
    ///     MySqlStatement::new("SELECT balance FROM account WHERE id = 7"),
    /// ])?;
    /// assert_eq!(answers[0].affected(), 1);
    /// if let [MySqlValue::Int(balance)] = answers[1].rows()[0].as_slice() {
    ///     println!("balance now {balance}");
    /// }
    /// # Ok(()) }
    /// ```
    pub struct MySqlRows;
}

impl MySqlStatement {
    /// [`Error::InvalidArgument`] for empty SQL, or SQL that begins, ends or commits a
    /// transaction (MySQL commits implicitly before and after DDL, `LOCK TABLES` and the
    /// like: such a statement would commit the guard's transaction before its end).
    pub(crate) fn check(&self) -> Result<()> {
        if self.sql.trim().is_empty() {
            return Err(Error::invalid(
                "a guarded statement's SQL must not be empty",
            ));
        }
        let word = first_word(&self.sql, &["--", "#"]);
        if COMMITS.contains(&word.as_str()) {
            return Err(Error::invalid(format!(
                "a guarded statement cannot begin, end or implicitly commit a transaction \
                 ({word} …): the guard's transaction is what commits"
            )));
        }
        Ok(())
    }

    /// The values as the driver's parameters.
    pub(crate) fn driver_params(&self) -> mysql::Params {
        if self.params.is_empty() {
            return mysql::Params::Empty;
        }
        mysql::Params::Positional(
            self.params
                .iter()
                .map(|v| match v {
                    MySqlValue::Null => mysql::Value::NULL,
                    MySqlValue::Int(i) => mysql::Value::Int(*i),
                    MySqlValue::Float(f) => mysql::Value::Double(*f),
                    MySqlValue::Text(s) => mysql::Value::Bytes(s.clone().into_bytes()),
                    MySqlValue::Bytes(b) => mysql::Value::Bytes(b.clone()),
                })
                .collect(),
        )
    }
}

/// The first words of the statements that begin, end or implicitly commit a transaction.
const COMMITS: &[&str] = &[
    "BEGIN",
    "START",
    "COMMIT",
    "ROLLBACK",
    "SAVEPOINT",
    "RELEASE",
    "XA",
    "SET",
    "LOCK",
    "UNLOCK",
    "CREATE",
    "ALTER",
    "DROP",
    "RENAME",
    "TRUNCATE",
    "GRANT",
    "REVOKE",
    "FLUSH",
    "ANALYZE",
    "OPTIMIZE",
    "REPAIR",
    "CACHE",
    "RESET",
    "CHECK",
];

/// A row's values.
pub(crate) fn values(row: mysql::Row) -> Vec<MySqlValue> {
    row.unwrap().into_iter().map(value).collect()
}

fn value(v: mysql::Value) -> MySqlValue {
    match v {
        mysql::Value::NULL => MySqlValue::Null,
        mysql::Value::Int(i) => MySqlValue::Int(i),
        mysql::Value::UInt(u) => {
            i64::try_from(u).map_or_else(|_| MySqlValue::Text(u.to_string()), MySqlValue::Int)
        }
        mysql::Value::Float(f) => MySqlValue::Float(f.into()),
        mysql::Value::Double(f) => MySqlValue::Float(f),
        mysql::Value::Bytes(b) => match String::from_utf8(b) {
            Ok(s) => MySqlValue::Text(s),
            Err(e) => MySqlValue::Bytes(e.into_bytes()),
        },
        other => {
            // A date or a time: its SQL literal, unquoted.
            let text = other.as_sql(true);
            MySqlValue::Text(text.trim_matches('\'').to_owned())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_that_would_commit_are_refused() {
        for sql in [
            "",
            " ",
            "COMMIT",
            "start transaction",
            "-- c\n CREATE TABLE t (i int)",
            "/* x */ set autocommit = 1",
            "# y\nLOCK TABLES t WRITE",
        ] {
            assert!(MySqlStatement::new(sql).check().is_err(), "{sql:?}");
        }
        for sql in [
            "UPDATE t SET committed = 1",
            "INSERT INTO t VALUES (?)",
            "SELECT 1",
            "DELETE FROM t",
        ] {
            assert!(MySqlStatement::new(sql).check().is_ok(), "{sql:?}");
        }
    }

    #[test]
    fn server_values_read_as_zklock_values() {
        assert_eq!(value(mysql::Value::UInt(7)), MySqlValue::Int(7));
        assert_eq!(
            value(mysql::Value::UInt(u64::MAX)),
            MySqlValue::Text(u64::MAX.to_string())
        );
        assert_eq!(
            value(mysql::Value::Bytes(vec![0xff])),
            MySqlValue::Bytes(vec![0xff])
        );
        assert_eq!(
            value(mysql::Value::Date(2026, 1, 2, 3, 4, 5, 0)),
            MySqlValue::Text("2026-01-02 03:04:05".into())
        );
    }
}
