//! Command-line flags as gRPC's interop binaries take them (`--name=value`, or
//! `--name value`), parsed into typed values; a bad flag is a [`FlagError`] naming it.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// A flag that cannot be used, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlagError {
    /// The flag, without its dashes.
    pub flag: String,
    /// What is wrong with it.
    pub problem: String,
}

impl FlagError {
    /// `--flag`: `problem`.
    pub fn new(flag: &str, problem: impl Into<String>) -> FlagError {
        FlagError {
            flag: flag.to_string(),
            problem: problem.into(),
        }
    }
}

impl fmt::Display for FlagError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "--{}: {}", self.flag, self.problem)
    }
}

impl std::error::Error for FlagError {}

/// The flags given, by name, checked against the names a binary knows.
#[derive(Debug)]
pub struct Flags {
    values: BTreeMap<String, String>,
}

impl Flags {
    /// Reads `args` (without the program name). Every flag must be one of `known`;
    /// `--name` alone is `--name=true` unless a value that is no flag follows.
    ///
    /// # Errors
    /// An argument that is no `--flag`, an unknown flag, or a flag given twice.
    pub fn parse(
        args: impl IntoIterator<Item = String>,
        known: &[&str],
    ) -> Result<Flags, FlagError> {
        let mut values = BTreeMap::new();
        let mut args = args.into_iter().peekable();
        while let Some(arg) = args.next() {
            let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
                return Err(FlagError::new(&arg, "not a flag (flags are --name=value)"));
            };
            let (name, value) = match flag.split_once('=') {
                Some((name, value)) => (name.to_string(), value.to_string()),
                None => {
                    let value = match args.peek() {
                        Some(next) if !next.starts_with('-') => args.next().unwrap_or_default(),
                        _ => "true".to_string(),
                    };
                    (flag.to_string(), value)
                }
            };
            if !known.contains(&name.as_str()) {
                return Err(FlagError::new(
                    &name,
                    format!("unknown flag (known: {})", known.join(", ")),
                ));
            }
            if values.insert(name.clone(), value).is_some() {
                return Err(FlagError::new(&name, "given twice"));
            }
        }
        Ok(Flags { values })
    }

    /// The raw value of `name`, if given.
    pub fn raw(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// `name` parsed as a `T`, or `default` when absent.
    ///
    /// # Errors
    /// A value that does not parse, named with the flag.
    pub fn get_or<T: FromStr>(&self, name: &str, default: T) -> Result<T, FlagError>
    where
        T::Err: fmt::Display,
    {
        match self.raw(name) {
            None => Ok(default),
            Some(value) => value
                .parse()
                .map_err(|e| FlagError::new(name, format!("{value:?}: {e}"))),
        }
    }

    /// `name` as a boolean (`true`/`false`), or `default` when absent.
    ///
    /// # Errors
    /// Anything but `true` or `false`.
    pub fn bool_or(&self, name: &str, default: bool) -> Result<bool, FlagError> {
        match self.raw(name) {
            None => Ok(default),
            Some("true") => Ok(true),
            Some("false") => Ok(false),
            Some(other) => Err(FlagError::new(
                name,
                format!("{other:?} is not true or false"),
            )),
        }
    }

    /// `name` as a port (1 to 65535), or `default` when absent.
    ///
    /// # Errors
    /// Not a number, or 0.
    pub fn port_or(&self, name: &str, default: u16) -> Result<u16, FlagError> {
        let port: u16 = self.get_or(name, default)?;
        if port == 0 {
            return Err(FlagError::new(name, "a port from 1 to 65535"));
        }
        Ok(port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Flags, FlagError> {
        Flags::parse(args.iter().map(|a| a.to_string()), &["port", "qps", "flag"])
    }

    #[test]
    fn both_spellings_and_bare_booleans() {
        let flags = parse(&["--port=8080", "--qps", "5", "--flag"]).expect("valid");
        assert_eq!(flags.port_or("port", 1), Ok(8080));
        assert_eq!(flags.get_or::<u32>("qps", 1), Ok(5));
        assert_eq!(flags.bool_or("flag", false), Ok(true));
    }

    #[test]
    fn errors_name_the_flag() {
        let e = parse(&["--nope=1"]).expect_err("unknown");
        assert_eq!(e.flag, "nope");
        let e = parse(&["--port=1", "--port=2"]).expect_err("twice");
        assert_eq!(e.to_string(), "--port: given twice");
        let flags = parse(&["--port=0", "--qps=x", "--flag=maybe"]).expect("parsed");
        assert_eq!(flags.port_or("port", 1).expect_err("zero").flag, "port");
        assert_eq!(flags.get_or::<u32>("qps", 1).expect_err("nan").flag, "qps");
        assert_eq!(flags.bool_or("flag", true).expect_err("bool").flag, "flag");
        assert_eq!(parse(&["stray"]).expect_err("stray").flag, "stray");
    }
}
