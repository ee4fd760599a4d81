//! The statements of a guarded SQL transaction and what each returned, whatever the server:
//! a backend names its value type and these types after itself (`sql_statement!`), gives its
//! value type the conversions every backend's has (`sql_value_from!`), and checks a
//! statement's SQL before any I/O with [`first_word`].

/// `From` a Rust value for the value type `$value` of a backend: `i32` and `i64` as its `Int`,
/// `f64` as `Float`, `&str` and `String` as `Text`, `&[u8]` and `Vec<u8>` as `Bytes`, `None`
/// as `Null` (and `Some(v)` as `v`).
macro_rules! sql_value_from {
    ($value:ident) => {
        impl From<i32> for $value {
            fn from(v: i32) -> Self {
                $value::Int(v.into())
            }
        }

        impl From<i64> for $value {
            fn from(v: i64) -> Self {
                $value::Int(v)
            }
        }

        impl From<f64> for $value {
            fn from(v: f64) -> Self {
                $value::Float(v)
            }
        }

        impl From<&str> for $value {
            fn from(v: &str) -> Self {
                $value::Text(v.to_owned())
            }
        }

        impl From<String> for $value {
            fn from(v: String) -> Self {
                $value::Text(v)
            }
        }

        impl From<&[u8]> for $value {
            fn from(v: &[u8]) -> Self {
                $value::Bytes(v.to_vec())
            }
        }

        impl From<Vec<u8>> for $value {
            fn from(v: Vec<u8>) -> Self {
                $value::Bytes(v)
            }
        }

        impl<T: Into<$value>> From<Option<T>> for $value {
            fn from(v: Option<T>) -> Self {
                v.map_or($value::Null, Into::into)
            }
        }
    };
}
pub(crate) use sql_value_from;

/// A backend's statement type `$statement` (SQL and the `$value`s bound to its parameters) and
/// rows type `$rows` (what one statement returned), each with the docs given; `bind` and
/// `params` are the docs of the methods of those names, which say how the backend numbers
/// its parameters.
macro_rules! sql_statement {
    (
        $(#[$statement_doc:meta])*
        pub struct $statement:ident($value:ident) {
            bind: $bind:literal,
            params: $params:literal $(,)?
        }

        $(#[$rows_doc:meta])*
        pub struct $rows:ident;
    ) => {
        $(#[$statement_doc])*
        #[derive(Clone, Debug, PartialEq)]
        pub struct $statement {
            sql: String,
            params: Vec<$value>,
        }

        impl $statement {
            /// A statement of `sql`, without parameters yet.
            pub fn new(sql: impl Into<String>) -> $statement {
                $statement {
                    sql: sql.into(),
                    params: Vec::new(),
                }
            }

            #[doc = $bind]
            #[must_use]
            pub fn bind(mut self, value: impl Into<$value>) -> $statement {
                self.params.push(value.into());
                self
            }

            /// The SQL.
            pub fn sql(&self) -> &str {
                &self.sql
            }

            #[doc = $params]
            pub fn params(&self) -> &[$value] {
                &self.params
            }

            /// The statement, shortened, for an error's message.
            pub(crate) fn shown(&self) -> String {
                const MAX: usize = 120;
                match self.sql.char_indices().nth(MAX) {
                    Some((end, _)) => format!("{}…", &self.sql[..end]),
                    None => self.sql.clone(),
                }
            }
        }

        $(#[$rows_doc])*
        #[derive(Clone, Debug, PartialEq)]
        pub struct $rows {
            affected: u64,
            rows: Vec<Vec<$value>>,
        }

        impl $rows {
            /// The rows the statement affected (inserted, updated, deleted) or returned.
            pub fn affected(&self) -> u64 {
                self.affected
            }

            /// The rows returned, each a value per column.
            pub fn rows(&self) -> &[Vec<$value>] {
                &self.rows
            }

            /// The rows returned, owned.
            pub fn into_rows(self) -> Vec<Vec<$value>> {
                self.rows
            }

            pub(crate) fn new(affected: u64, rows: Vec<Vec<$value>>) -> $rows {
                $rows { affected, rows }
            }
        }
    };
}
pub(crate) use sql_statement;

/// `sql`'s first word (after blanks and comments), in upper case: a comment is `/* … */`, or
/// one of `line_comments` to the end of its line.
pub(crate) fn first_word(sql: &str, line_comments: &[&str]) -> String {
    let mut rest = sql.trim_start();
    loop {
        if let Some(after) = line_comments.iter().find_map(|c| rest.strip_prefix(c)) {
            rest = after.split_once('\n').map_or("", |(_, r)| r).trim_start();
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.split_once("*/").map_or("", |(_, r)| r).trim_start();
        } else {
            break;
        }
    }
    rest.chars()
        .take_while(char::is_ascii_alphabetic)
        .collect::<String>()
        .to_ascii_uppercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_word_is_found_behind_comments() {
        assert_eq!(first_word(" -- x\n /* y */ commit;", &["--"]), "COMMIT");
        assert_eq!(first_word("# x\nLock tables t", &["--", "#"]), "LOCK");
        assert_eq!(first_word("# x\nLock tables t", &["--"]), "");
        assert_eq!(first_word("/* never closed", &["--"]), "");
        assert_eq!(first_word("-- only a comment", &["--"]), "");
        assert_eq!(first_word("", &["--"]), "");
    }
}
