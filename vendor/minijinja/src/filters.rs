//! Filter functions and abstractions.
//!
//! MiniJinja inherits from Jinja2 the concept of filter functions.  These are functions
//! which are applied to values to modify them.  For example the expression `{{ 42|filter(23) }}`
//! invokes the filter `filter` with the arguments `42` and `23`.
//!
//! MiniJinja comes with some built-in filters that are listed below. To create a
//! custom filter write a function that takes at least a value, then registers it
//! with [`add_filter`](crate::Environment::add_filter).
//!
//! # Using Filters
//!
//! Using filters in templates is possible in all places an expression is permitted.
//! This means they are not just used for printing but also are useful for iteration
//! or similar situations.
//!
//! Motivating example:
//!
//! ```jinja
//! <dl>
//! {% for key, value in config|items %}
//!   <dt>{{ key }}
//!   <dd><pre>{{ value|tojson }}</pre>
//! {% endfor %}
//! </dl>
//! ```
//!
//! # Custom Filters
//!
//! A custom filter is just a simple function which accepts its inputs
//! as parameters and then returns a new value.  For instance the following
//! shows a filter which takes an input value and replaces whitespace with
//! dashes and converts it to lowercase:
//!
//! ```
//! # use minijinja::Environment;
//! # let mut env = Environment::new();
//! fn slugify(value: String) -> String {
//!     value.to_lowercase().split_whitespace().collect::<Vec<_>>().join("-")
//! }
//!
//! env.add_filter("slugify", slugify);
//! ```
//!
//! MiniJinja will perform the necessary conversions automatically.  For more
//! information see the [`Function`](crate::functions::Function) trait.
//!
//! Filters which transform strings and need to preserve the input's escaping
//! safety can use [`StringInput`](crate::value::StringInput) as their argument
//! type.  It retains the safety provenance that conversion to [`String`] would
//! otherwise discard.
//!
//! # Accessing State
//!
//! In some cases it can be necessary to access the execution [`State`].  A filter
//! can request shared or mutable state by taking `&State` or `&mut State` as its
//! first parameter.  State is injected separately from the filter's value arguments.
//! For instance, the following filter appends the current template name to the string:
//!
//! ```
//! # use minijinja::Environment;
//! # let mut env = Environment::new();
//! use minijinja::{Value, State};
//!
//! fn append_template(state: &State, value: &Value) -> String {
//!     format!("{}-{}", value, state.name())
//! }
//!
//! env.add_filter("append_template", append_template);
//! ```
//!
//! Filters which need to modify the state can instead take `&mut State`.  A
//! mutable state must be the filter's first parameter and can only be requested
//! once.
//!
//! # Filter configuration
//!
//! The recommended pattern for filters to change their behavior is to leverage global
//! variables in the template.  For instance take a filter that performs date formatting.
//! You might want to change the default time format format on a per-template basis
//! without having to update every filter invocation.  In this case the recommended
//! pattern is to reserve upper case variables and look them up in the filter:
//!
//! ```
//! # use minijinja::Environment;
//! # let mut env = Environment::new();
//! # fn format_unix_timestamp(_: f64, _: &str) -> String { "".into() }
//! use minijinja::State;
//!
//! fn timeformat(state: &State, ts: f64) -> String {
//!     let configured_format = state.lookup("TIME_FORMAT");
//!     let format = configured_format
//!         .as_ref()
//!         .and_then(|x| x.as_str())
//!         .unwrap_or("HH:MM:SS");
//!     format_unix_timestamp(ts, format)
//! }
//!
//! env.add_filter("timeformat", timeformat);
//! ```
//!
//! This then later lets a user override the default either by using
//! [`add_global`](crate::Environment::add_global) or by passing it with the
//! [`context!`] macro or similar.
//!
//! ```
//! # use minijinja::context;
//! # let other_variables = context!{};
//! let ctx = context! {
//!     TIME_FORMAT => "HH:MM",
//!     ..other_variables
//! };
//! ```
//!
//! # Built-in Filters
//!
//! When the `builtins` feature is enabled a range of built-in filters are
//! automatically added to the environment.  These are also all provided in
//! this module.  Note though that these functions are not to be
//! called from Rust code as their exact interface (arguments and return types)
//! might change from one MiniJinja version to another.
//!
//! Some additional filters are available in the
//! [`minijinja-contrib`](https://crates.io/crates/minijinja-contrib) crate.
use crate::error::Error;
use crate::utils::write_escaped;
use crate::value::Value;
use crate::vm::State;
use crate::{AutoEscape, Output};

/// Marks a value as safe.  This converts it into a string.
///
/// When a value is marked as safe, no further auto escaping will take place.
pub fn safe(v: String) -> Value {
    Value::from_safe_string(v)
}

/// Escapes a string.  By default to HTML.
///
/// By default this filter is also registered under the alias `e`.  Note that
/// this filter escapes with the format that is native to the format or HTML
/// otherwise.  This means that if the auto escape setting is set to
/// `Json` for instance then this filter will serialize to JSON instead.
pub fn escape(state: &mut State, v: &Value) -> Result<Value, Error> {
    if v.is_safe() {
        return Ok(v.clone());
    }

    // this tries to use the escaping flag of the current scope, then
    // of the initial state and if that is also not set it falls back
    // to HTML.
    let auto_escape = match state.auto_escape() {
        AutoEscape::None => match state.env().initial_auto_escape(state.name()) {
            AutoEscape::None => AutoEscape::Html,
            other => other,
        },
        other => other.clone(),
    };
    let mut rv = match v.as_str() {
        Some(s) => String::with_capacity(s.len()),
        None => String::new(),
    };
    let mut out = Output::new(&mut rv);
    if matches!(auto_escape, AutoEscape::Custom(_)) {
        // The formatter reads the escape mode from state, so temporarily
        // override it to ensure |e honors the computed escape mode even when
        // auto-escape is disabled in the current scope. The default formatter
        // also errors on custom auto-escape formats, so we must route through
        // the environment formatter here.
        ok!(state.with_auto_escape(auto_escape, |state| {
            state.env().format(v, state, &mut out)
        }));
    } else {
        ok!(write_escaped(&mut out, &auto_escape, v));
    }
    Ok(Value::from_safe_string(rv))
}

#[cfg(feature = "builtins")]
mod builtins {
    use super::*;

    use crate::error::ErrorKind;
    use crate::formatting::{format_printf_with, FormatConversion};
    use crate::utils::{safe_sort, splitn_whitespace, untrusted_size_hint};
    use crate::value::merge_object::{MergeDict, MergeSeq};
    use crate::value::ops::{self, as_f64, LenIterWrap};
    use crate::value::{
        checked, Enumerator, Kwargs, MaybeInvalid, Object, ObjectRepr, Rest, StringInput, Tuple,
        ValueKind, ValueOrKwargs, ValueRepr,
    };
    use std::borrow::Cow;
    use std::cmp::Ordering;
    use std::fmt::Write;
    use std::mem;
    use std::sync::Arc;

    /// Converts a value to uppercase.
    ///
    /// ```jinja
    /// <h1>{{ chapter.title|upper }}</h1>
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn upper(value: StringInput<'_>) -> Value {
        let output = value.as_str().to_uppercase();
        value.preserve_safety(output)
    }

    /// Converts a value to lowercase.
    ///
    /// ```jinja
    /// <h1>{{ chapter.title|lower }}</h1>
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn lower(value: StringInput<'_>) -> Value {
        let output = value.as_str().to_lowercase();
        value.preserve_safety(output)
    }

    /// Converts a value to title case.
    ///
    /// Words are started by whitespace or one of `-`, `(`, `{`, `[` and `<`.
    /// Other punctuation such as `'`, `.` or `_` does not start a new word,
    /// so `don't` becomes `Don't` rather than `Don'T`.
    ///
    /// ```jinja
    /// <h1>{{ chapter.title|title }}</h1>
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn title(v: Cow<'_, str>) -> String {
        let mut rv = String::new();
        let mut capitalize = true;
        for c in v.chars() {
            if matches!(c, '-' | '(' | '{' | '[' | '<') || c.is_whitespace() {
                rv.push(c);
                capitalize = true;
            } else if capitalize {
                write!(rv, "{}", c.to_uppercase()).unwrap();
                capitalize = false;
            } else {
                write!(rv, "{}", c.to_lowercase()).unwrap();
            }
        }
        rv
    }

    /// Convert the string with all its characters lowercased
    /// apart from the first char which is uppercased.
    ///
    /// ```jinja
    /// <h1>{{ chapter.title|capitalize }}</h1>
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn capitalize(value: StringInput<'_>) -> Value {
        let mut chars = value.as_str().chars();
        let output = match chars.next() {
            None => String::new(),
            Some(first) => {
                first.to_uppercase().collect::<String>() + &chars.as_str().to_lowercase()
            }
        };
        value.preserve_safety(output)
    }

    /// Does a string replace.
    ///
    /// It replaces all occurrences of the first parameter with the second.
    ///
    /// ```jinja
    /// {{ "Hello World"|replace("Hello", "Goodbye") }}
    ///   -> Goodbye World
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn replace(
        state: &mut State,
        value: StringInput<'_>,
        from: StringInput<'_>,
        to: StringInput<'_>,
    ) -> Result<Value, Error> {
        let safety_aware = !matches!(state.auto_escape(), AutoEscape::None)
            && (value.is_safe() || from.is_safe() || to.is_safe());
        if to.as_str().len() > from.as_str().len() {
            let count = if from.as_str().is_empty() {
                value.as_str().chars().count() + 1
            } else {
                value.as_str().matches(from.as_str()).count()
            };
            ok!(crate::bounds::check_len(
                count
                    .checked_mul(to.as_str().len() - from.as_str().len())
                    .and_then(|extra| extra.checked_add(value.as_str().len())),
                "a replaced string"
            ));
        }

        if safety_aware {
            let output = value
                .format(state)?
                .replace(from.as_str(), &to.format(state)?);
            Ok(Value::from_safe_string(output))
        } else {
            Ok(Value::from(
                value.as_str().replace(from.as_str(), to.as_str()),
            ))
        }
    }

    /// Returns the "length" of the value
    ///
    /// By default this filter is also registered under the alias `count`.
    ///
    /// ```jinja
    /// <p>Search results: {{ results|length }}
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn length(v: &Value) -> Result<usize, Error> {
        v.len().ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidOperation,
                format!("cannot calculate length of value of type {}", v.kind()),
            )
            .with_undefined_origin(v)
        })
    }

    /// Sorts `(key, payload)` pairs by key.
    ///
    /// Keyed sorts funnel through this so that keys are computed only once per
    /// item and only a single sort implementation is emitted for all of them.
    /// A `None` key compares equal to everything.
    #[inline(never)]
    fn sort_keyed(
        items: &mut [(Option<Value>, Value)],
        case_sensitive: bool,
        reverse: bool,
    ) -> Result<(), Error> {
        safe_sort(items, |a, b| match (&a.0, &b.0) {
            (Some(a), Some(b)) => cmp_helper(a, b, case_sensitive, reverse),
            _ => Ordering::Equal,
        })
    }

    fn fold_case(s: &str) -> String {
        #[cfg(feature = "unicode")]
        {
            s.to_lowercase()
        }
        #[cfg(not(feature = "unicode"))]
        {
            s.to_ascii_lowercase()
        }
    }

    fn cmp_helper(a: &Value, b: &Value, case_sensitive: bool, reverse: bool) -> Ordering {
        let ordering = if !case_sensitive {
            if let (Some(a), Some(b)) = (a.as_str(), b.as_str()) {
                #[cfg(feature = "unicode")]
                {
                    unicase::UniCase::new(a).cmp(&unicase::UniCase::new(b))
                }
                #[cfg(not(feature = "unicode"))]
                {
                    a.to_ascii_lowercase().cmp(&b.to_ascii_lowercase())
                }
            } else {
                a.cmp(b)
            }
        } else {
            a.cmp(b)
        };

        if reverse {
            ordering.reverse()
        } else {
            ordering
        }
    }

    /// Dict sorting functionality.
    ///
    /// This filter works like `|items` but sorts the pairs by key first.
    ///
    /// The filter accepts a few keyword arguments:
    ///
    /// * `case_sensitive`: set to `true` to make the sorting of strings case sensitive.
    /// * `by`: set to `"value"` to sort by value. Defaults to `"key"`.
    /// * `reverse`: set to `true` to sort in reverse.
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn dictsort(v: &Value, kwargs: Kwargs) -> Result<Value, Error> {
        if v.kind() != ValueKind::Map {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "cannot convert value into pair list",
            ));
        }

        let by_value = matches!(ok!(kwargs.get("by")), Some("value"));
        let case_sensitive = ok!(kwargs.get::<Option<bool>>("case_sensitive")).unwrap_or(false);
        let reverse = ok!(kwargs.get::<Option<bool>>("reverse")).unwrap_or(false);
        let mut rv: Vec<_> = if let Some(iter) = v.as_object().and_then(|v| v.try_iter_pairs()) {
            ok!(checked(iter).try_collect_vec())
        } else {
            let mut rv = Vec::new();
            for key in ok!(v.try_iter()).checked() {
                let key = ok!(key);
                let value = v.get_item(&key).unwrap_or(Value::UNDEFINED);
                rv.push((key, value));
            }
            rv
        };
        safe_sort(&mut rv, |a, b| {
            let (a, b) = if by_value { (&a.1, &b.1) } else { (&a.0, &b.0) };
            cmp_helper(a, b, case_sensitive, reverse)
        })?;
        kwargs.assert_all_used()?;
        Ok(rv.into_iter().map(Value::from).collect())
    }

    /// Returns an iterable of pairs (items) from a mapping.
    ///
    /// This can be used to iterate over keys and values of a mapping
    /// at once.  Note that this will use the original order of the map
    /// which is typically arbitrary unless the `preserve_order` feature
    /// is used in which case the original order of the map is retained.
    /// It's generally better to use `|dictsort` which sorts the map by
    /// key before iterating.
    ///
    /// ```jinja
    /// <dl>
    /// {% for key, value in my_dict|items %}
    ///   <dt>{{ key }}
    ///   <dd>{{ value }}
    /// {% endfor %}
    /// </dl>
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn items(v: &Value) -> Result<Value, Error> {
        if v.kind() == ValueKind::Map {
            Ok(Value::make_object_iterable(v.clone(), |v| {
                match v.as_object().and_then(|v| v.try_iter_pairs()) {
                    // invalid keys are passed through rather than wrapped in a pair
                    Some(iter) => Box::new(
                        checked(iter).map(|pair| pair.map_or_else(Value::from, Value::from)),
                    ),
                    None => Box::new(
                        // this really should not happen unless the object changes it's shape
                        // after the initial check
                        Some(Value::from(Error::new(
                            ErrorKind::InvalidOperation,
                            format!("{} is not iterable", v.kind()),
                        )))
                        .into_iter(),
                    ),
                }
            }))
        } else {
            Err(Error::new(
                ErrorKind::InvalidOperation,
                "cannot convert value into pairs",
            ))
        }
    }

    /// Reverses an iterable or string
    ///
    /// ```jinja
    /// {% for user in users|reverse %}
    ///   <li>{{ user.name }}
    /// {% endfor %}
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn reverse(value: &Value) -> Result<Value, Error> {
        if value.kind() == ValueKind::String {
            let string = value.as_str().unwrap();
            let output = string.chars().rev().collect::<String>();
            if value.is_safe() {
                Ok(Value::from_safe_string(output))
            } else {
                Ok(Value::from(output))
            }
        } else {
            value.reverse()
        }
    }

    /// Trims a string.
    ///
    /// By default, it trims leading and trailing whitespaces:
    ///
    /// ```jinja
    /// {{ "  non-space characters  " | trim }} -> "non-space characters"
    /// ```
    ///
    /// You can also remove a character sequence.  All the prefixes and suffixes
    /// matching the sequence are removed:
    ///
    /// ```jinja
    /// {{ "1212foo12bar1212" | trim("12") }} -> "foo12bar"
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn trim(value: StringInput<'_>, chars: Option<Cow<'_, str>>) -> Value {
        let output = match chars {
            Some(chars) => {
                let chars = chars.chars().collect::<Vec<_>>();
                value.as_str().trim_matches(&chars[..]).to_string()
            }
            None => value.as_str().trim().to_string(),
        };
        value.preserve_safety(output)
    }

    /// Joins a sequence by a character
    ///
    /// The separator is passed as the first argument or as `d`.  The
    /// `attribute` argument can be set to an attribute or dotted path to
    /// join that attribute of the items instead of the items themselves.
    ///
    /// ```jinja
    /// {{ "Foo Bar Baz" | join(", ") }} -> foo, bar, baz
    /// {{ users|join(", ", attribute="username") }}
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn join(
        state: &mut State,
        value: &Value,
        joiner: Option<StringInput<'_>>,
        attribute: Option<&str>,
        kwargs: Kwargs,
    ) -> Result<Value, Error> {
        fn join_plain(iter: impl Iterator<Item = Value>, joiner: &str) -> Result<String, Error> {
            let mut output = crate::bounds::BoundedString::default();
            for (idx, item) in iter.enumerate() {
                ok!(item.check());
                if idx > 0 {
                    ok!(output.push_str(joiner, "a joined string"));
                }
                if let Some(string) = item.as_str() {
                    ok!(output.push_str(string, "a joined string"));
                } else {
                    write!(output, "{item}").ok();
                }
            }
            output.finish("a joined string")
        }

        fn join_safe(
            state: &mut State,
            iter: impl Iterator<Item = Value>,
            joiner: &str,
        ) -> Result<String, Error> {
            let mut output = crate::bounds::BoundedString::default();
            for (idx, item) in iter.enumerate() {
                ok!(item.check());
                if idx > 0 {
                    ok!(output.push_str(joiner, "a joined string"));
                }
                if item.is_safe() {
                    ok!(output.push_str(item.as_str().unwrap(), "a joined string"));
                } else {
                    ok!(output.push_str(&ok!(state.format(item)), "a joined string"));
                }
            }
            output.finish("a joined string")
        }

        let joiner = match joiner {
            Some(joiner) => Some(joiner),
            None => ok!(kwargs.get::<Option<StringInput<'_>>>("d")),
        };
        let attribute = match attribute {
            Some(attribute) => Some(attribute),
            None => ok!(kwargs.get::<Option<&str>>("attribute")),
        };
        ok!(kwargs.assert_all_used());

        let joiner_str = joiner.as_ref().map(StringInput::as_str).unwrap_or_default();
        let iter = ok!(value.try_iter().map_err(|err| {
            Error::new(
                ErrorKind::InvalidOperation,
                format!("cannot join value of type {}", value.kind()),
            )
            .with_source(err)
        }));
        let iter = iter.map(|item| map_attribute(item, attribute));

        if matches!(state.auto_escape(), AutoEscape::None) {
            return Ok(Value::from(ok!(join_plain(iter, joiner_str))));
        }

        if joiner.as_ref().is_some_and(StringInput::is_safe) {
            return Ok(Value::from_safe_string(ok!(join_safe(
                state, iter, joiner_str
            ))));
        }

        // A plain joiner only becomes safe if at least one item is safe.  This
        // is the one case where the iterable must be inspected before output.
        let items = ok!(checked(iter).try_collect_vec());
        if items.iter().any(Value::is_safe) {
            let joiner = match joiner.as_ref() {
                Some(joiner) => ok!(joiner.format(state)),
                None => Cow::Borrowed(""),
            };
            Ok(Value::from_safe_string(ok!(join_safe(
                state,
                items.into_iter(),
                &joiner
            ))))
        } else {
            Ok(Value::from(ok!(join_plain(items.into_iter(), joiner_str))))
        }
    }

    /// Split a string into its substrings, using `split` as the separator string.
    ///
    /// If `split` is not provided or `none` the string is split at all whitespace
    /// characters and multiple spaces and empty strings will be removed from the
    /// result.
    ///
    /// The `maxsplits` parameter defines the maximum number of splits
    /// (starting from the left).  Note that this follows Python conventions
    /// rather than Rust ones so `1` means one split and two resulting items.
    ///
    /// ```jinja
    /// {{ "hello world"|split }}
    ///     -> ["hello", "world"]
    ///
    /// {{ "c,s,v"|split(",") }}
    ///     -> ["c", "s", "v"]
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn split(
        value: &Value,
        split: Option<Arc<str>>,
        maxsplits: Option<i64>,
    ) -> Result<Value, Error> {
        let string = Arc::<str>::try_from(value.clone())?;
        let maxsplits = maxsplits.and_then(|x| if x >= 0 { Some(x as usize + 1) } else { None });
        let preserve_safety = value.kind() == ValueKind::String && value.is_safe();
        let wrap = |item: &str| {
            if preserve_safety {
                Value::from_safe_string(item.to_string())
            } else {
                Value::from(item)
            }
        };

        // Materialize into a sequence (like `lines`) so negative indexing and
        // slicing work, e.g. `("1.2.3"|split("."))[-1]`.
        Ok(match (split, maxsplits) {
            (None, None) => Value::from_iter(string.split_whitespace().map(wrap)),
            (Some(sep), None) => Value::from_iter(string.split(sep.as_ref()).map(wrap)),
            (None, Some(n)) => Value::from_iter(splitn_whitespace(&string, n).map(wrap)),
            (Some(sep), Some(n)) => Value::from_iter(string.splitn(n, sep.as_ref()).map(wrap)),
        })
    }

    /// Splits a string into lines.
    ///
    /// The newline character is removed in the process and not retained.  This
    /// function supports both Windows and UNIX style newlines.
    ///
    /// ```jinja
    /// {{ "foo\nbar\nbaz"|lines }}
    ///     -> ["foo", "bar", "baz"]
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn lines(value: &Value) -> Result<Value, Error> {
        let string = Arc::<str>::try_from(value.clone())?;
        let preserve_safety = value.kind() == ValueKind::String && value.is_safe();
        Ok(Value::from_iter(string.lines().map(|line| {
            if preserve_safety {
                Value::from_safe_string(line.to_string())
            } else {
                Value::from(line)
            }
        })))
    }

    /// If the value is undefined it will return the passed default value,
    /// otherwise the value of the variable:
    ///
    /// ```jinja
    /// <p>{{ my_variable|default("my_variable was not defined") }}</p>
    /// ```
    ///
    /// Setting the optional second parameter to `true` will also treat falsy
    /// values as undefined, e.g. empty strings:
    ///
    /// ```jinja
    /// <p>{{ ""|default("string was empty", true) }}</p>
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn default(state: &State, value: &Value, args: Rest<Value>) -> Result<Value, Error> {
        if args.len() > 2 {
            return Err(Error::from(ErrorKind::TooManyArguments));
        }

        let other = args.first().cloned().unwrap_or_else(|| Value::from(""));
        let lax = if let Some(lax) = args.get(1) {
            ok!(state.undefined_behavior().is_true(lax))
        } else {
            false
        };

        if value.is_undefined() || (lax && !value.is_true()) {
            Ok(other)
        } else {
            Ok(value.clone())
        }
    }

    /// Returns the absolute value of a number.
    ///
    /// ```jinja
    /// |a - b| = {{ (a - b)|abs }}
    ///   -> |2 - 4| = 2
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn abs(value: Value) -> Result<Value, Error> {
        match value.0 {
            ValueRepr::U64(_) | ValueRepr::U128(_) => Ok(value),
            ValueRepr::I64(x) => match x.checked_abs() {
                Some(rv) => Ok(Value::from(rv)),
                None => Ok(Value::from((x as i128).abs())), // this cannot overflow
            },
            ValueRepr::I128(x) => {
                x.0.checked_abs()
                    .map(Value::from)
                    .ok_or_else(|| Error::new(ErrorKind::InvalidOperation, "overflow on abs"))
            }
            ValueRepr::F64(x) => Ok(Value::from(x.abs())),
            _ => Err(Error::new(
                ErrorKind::InvalidOperation,
                "cannot get absolute value",
            )),
        }
    }

    /// Converts a value into an integer.
    ///
    /// Strings are parsed in the given `base` (10 by default).  For bases 2, 8
    /// and 16 the string may carry a `0b`, `0o` or `0x` prefix.  If the value
    /// cannot be converted and a `default` is given, the default is returned
    /// instead of an error.  `none` converts to the default or 0.
    ///
    /// ```jinja
    /// {{ "42"|int == 42 }} -> true
    /// {{ "0x1f"|int(base=16) }} -> 31
    /// {{ "n/a"|int(default=0) }} -> 0
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn int(
        state: &State,
        value: &Value,
        default: Option<Value>,
        base: Option<u32>,
        kwargs: Kwargs,
    ) -> Result<Value, Error> {
        let default = match default {
            Some(default) => Some(default),
            None => ok!(kwargs.get::<Option<Value>>("default")),
        };
        let base = match base {
            Some(base) => base,
            None => ok!(kwargs.get::<Option<u32>>("base")).unwrap_or(10),
        };
        ok!(kwargs.assert_all_used());

        let rv = match &value.0 {
            ValueRepr::Undefined(..) | ValueRepr::None => {
                ok!(state.undefined_behavior().assert_value_not_undefined(value));
                return Ok(default.unwrap_or(Value::from(0)));
            }
            ValueRepr::Bool(x) => return Ok(Value::from(*x as u64)),
            ValueRepr::U64(_) | ValueRepr::I64(_) | ValueRepr::U128(_) | ValueRepr::I128(_) => {
                return Ok(value.clone())
            }
            ValueRepr::F64(v) => return Ok(Value::from(*v as i128)),
            ValueRepr::String(..) | ValueRepr::SmallStr(_) => {
                let s = value.as_str().unwrap();
                if let Some(i) = parse_int(s, base) {
                    return Ok(Value::from(i));
                }
                s.parse::<f64>()
                    .map(|f| Value::from(f as i128))
                    .map_err(|err| Error::new(ErrorKind::InvalidOperation, err.to_string()))
            }
            ValueRepr::Bytes(_) | ValueRepr::Object(_) => Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("cannot convert {} to integer", value.kind()),
            )),
            ValueRepr::Invalid(_) => return value.clone().validate(),
        };
        rv.or_else(|err| default.ok_or(err))
    }

    /// Parses an integer like Python's `int(s, base)` does, except that
    /// underscores and surrounding whitespace are not accepted.
    fn parse_int(s: &str, base: u32) -> Option<i128> {
        let prefix = match base {
            2 => "0b",
            8 => "0o",
            16 => "0x",
            3..=36 => "",
            _ => return None,
        };
        let (negative, digits) = match s.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, s.strip_prefix('+').unwrap_or(s)),
        };
        let digits = match digits.get(..prefix.len()) {
            Some(p) if !prefix.is_empty() && p.eq_ignore_ascii_case(prefix) => {
                &digits[prefix.len()..]
            }
            _ => digits,
        };
        if digits.starts_with(['+', '-']) {
            return None;
        }
        let rv = i128::from_str_radix(digits, base).ok()?;
        Some(if negative { -rv } else { rv })
    }

    /// Converts a value into a float.
    ///
    /// If the value cannot be converted and a `default` is given, the default
    /// is returned instead of an error.  `none` converts to the default or 0.0.
    ///
    /// ```jinja
    /// {{ "42.5"|float == 42.5 }} -> true
    /// {{ "n/a"|float(default=0.0) }} -> 0.0
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn float(
        state: &State,
        value: &Value,
        default: Option<Value>,
        kwargs: Kwargs,
    ) -> Result<Value, Error> {
        let default = match default {
            Some(default) => Some(default),
            None => ok!(kwargs.get::<Option<Value>>("default")),
        };
        ok!(kwargs.assert_all_used());

        let rv = match &value.0 {
            ValueRepr::Undefined(..) | ValueRepr::None => {
                ok!(state.undefined_behavior().assert_value_not_undefined(value));
                return Ok(default.unwrap_or(Value::from(0.0)));
            }
            ValueRepr::Bool(x) => return Ok(Value::from(*x as u64 as f64)),
            ValueRepr::String(..) | ValueRepr::SmallStr(_) => value
                .as_str()
                .unwrap()
                .parse::<f64>()
                .map(Value::from)
                .map_err(|err| Error::new(ErrorKind::InvalidOperation, err.to_string())),
            ValueRepr::Invalid(_) => return value.clone().validate(),
            _ => as_f64(value, true).map(Value::from).ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidOperation,
                    format!("cannot convert {} to float", value.kind()),
                )
            }),
        };
        rv.or_else(|err| default.ok_or(err))
    }

    /// Sums up all the values in a sequence.
    ///
    /// The filter accepts two arguments, positionally or by keyword:
    ///
    /// * `attribute`: can be set to an attribute or dotted path to sum up
    ///   that attribute of the items.  Items without it are skipped.
    /// * `start`: the value to start from (defaults to `0`).  Like in Jinja2
    ///   this can also be a list to concatenate lists.
    ///
    /// ```jinja
    /// {{ range(10)|sum }} -> 45
    /// {{ range(10)|sum(start=10) }} -> 55
    /// {{ items|sum(attribute="price") }}
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn sum(
        state: &State,
        values: Value,
        attribute: Option<&str>,
        start: Option<Value>,
        kwargs: Kwargs,
    ) -> Result<Value, Error> {
        let attribute = match attribute {
            Some(attribute) => Some(attribute),
            None => ok!(kwargs.get::<Option<&str>>("attribute")),
        };
        let start = match start {
            Some(start) => start,
            None => ok!(kwargs.get::<Option<Value>>("start")).unwrap_or(Value::from(0)),
        };
        ok!(kwargs.assert_all_used());

        let mut rv = start;
        let iter = ok!(state.undefined_behavior().try_iter(values));
        for value in iter.map(|item| map_attribute(item, attribute)) {
            ok!(value.check());
            if value.is_undefined() {
                continue;
            } else if rv.is_number() && !value.is_number() && value.kind() != ValueKind::Bool {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("can only sum numbers, got {}", value.kind()),
                ));
            }
            rv = ok!(ops::add(&rv, &value));
        }

        Ok(rv)
    }

    /// Replaces an item with its attribute.  Invalid items are kept so that
    /// their error is reported.
    fn map_attribute(item: Value, attribute: Option<&str>) -> Value {
        match attribute {
            Some(attr) if item.check().is_ok() => item.get_path_or_default(attr, &Value::UNDEFINED),
            _ => item,
        }
    }

    /// Looks up an attribute.
    ///
    /// In MiniJinja this is the same as the `[]` operator.  In Jinja2 there is a
    /// small difference which is why this filter is sometimes used in Jinja2
    /// templates.  For compatibility it's provided here as well.
    ///
    /// ```jinja
    /// {{ value['key'] == value|attr('key') }} -> true
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn attr(value: &Value, key: &Value) -> Result<Value, Error> {
        value.get_item(key)
    }

    fn round_too_large() -> Error {
        Error::new(
            ErrorKind::InvalidOperation,
            "rounded value is too large to represent",
        )
    }

    fn round_with_negative_precision(value: f64, precision: i32) -> Result<f64, Error> {
        if !value.is_finite() {
            return Ok(value);
        }

        let decimal_place = -i64::from(precision);
        if decimal_place >= 309 {
            return Ok(0.0f64.copysign(value));
        }

        // Use enough decimal digits to represent any f64 exactly.  Rounding the
        // decimal digits avoids introducing an approximate division by 10^n.
        let formatted = format!("{:.1074e}", value.abs());
        let (mantissa, exponent) = formatted
            .split_once('e')
            .expect("scientific formatting must contain an exponent");
        let exponent = exponent
            .parse::<i64>()
            .expect("scientific exponent must be an integer");
        let retained_len = exponent - decimal_place + 1;
        if retained_len < 0 {
            return Ok(0.0f64.copysign(value));
        }

        let digits = mantissa
            .bytes()
            .filter(u8::is_ascii_digit)
            .collect::<Vec<_>>();
        let retained_len = retained_len as usize;
        let discarded = &digits[retained_len..];
        let last_retained = retained_len
            .checked_sub(1)
            .map_or(0, |idx| digits[idx] - b'0');
        let round_up = discarded[0] > b'5'
            || (discarded[0] == b'5'
                && (discarded[1..].iter().any(|&digit| digit != b'0') || last_retained % 2 != 0));

        let mut retained = digits[..retained_len].to_vec();
        if round_up {
            let mut carry = true;
            for digit in retained.iter_mut().rev() {
                if *digit == b'9' {
                    *digit = b'0';
                } else {
                    *digit += 1;
                    carry = false;
                    break;
                }
            }
            if carry {
                retained.insert(0, b'1');
            }
        }
        if retained.is_empty() || retained.iter().all(|&digit| digit == b'0') {
            return Ok(0.0f64.copysign(value));
        }

        let coefficient = String::from_utf8(retained).unwrap();
        let rounded = format!(
            "{}{coefficient}e{decimal_place}",
            if value.is_sign_negative() { "-" } else { "" }
        )
        .parse::<f64>()
        .map_err(|_| Error::new(ErrorKind::InvalidOperation, "unable to round value"))?;
        if rounded.is_infinite() {
            return Err(round_too_large());
        }
        Ok(rounded)
    }

    /// Rounds a float with `ceil` or `floor` like Jinja2 does: the value is
    /// scaled by `10^precision`, rounded to an integer and scaled back.
    fn round_directed(value: f64, precision: i32, ceil: bool) -> Result<f64, Error> {
        if !value.is_finite() {
            return Ok(value);
        }
        let factor = format!("1e{precision}").parse::<f64>().unwrap();
        let scaled = value * factor;
        if scaled.is_infinite() {
            // the value has no digits at this precision
            return Ok(value);
        }
        let rounded = if ceil { scaled.ceil() } else { scaled.floor() };
        // adding 0.0 turns -0.0 into 0.0 like Python's integer result does
        let rv = (rounded + 0.0) / factor;
        if !rv.is_finite() {
            return Err(round_too_large());
        }
        Ok(rv)
    }

    /// Rounds an integer to a negative precision, that is to a multiple of
    /// `10^-precision`.
    fn round_int(value: i128, precision: i32, method: &str) -> Result<i128, Error> {
        let Some(factor) = 10i128.checked_pow(precision.unsigned_abs()) else {
            // the factor is larger than any integer, so only zero is in reach
            return match method {
                "ceil" if value > 0 => Err(round_too_large()),
                "floor" if value < 0 => Err(round_too_large()),
                _ => Ok(0),
            };
        };
        let quotient = value.div_euclid(factor);
        let remainder = value.rem_euclid(factor);
        let round_up = match method {
            "ceil" => remainder > 0,
            "floor" => false,
            // round half to even like Python's round()
            _ => {
                remainder > factor - remainder
                    || (remainder == factor - remainder && quotient % 2 != 0)
            }
        };
        (quotient + round_up as i128)
            .checked_mul(factor)
            .ok_or_else(round_too_large)
    }

    /// Round the number to a given precision.
    ///
    /// The first parameter specifies the precision (default is 0), the second
    /// the rounding method:
    ///
    /// - `common` rounds half to even (default)
    /// - `ceil` always rounds up
    /// - `floor` always rounds down
    ///
    /// Both can also be passed as keyword arguments.  Integers are returned
    /// unchanged unless the precision is negative.
    ///
    /// ```jinja
    /// {{ 42.55|round }}
    ///   -> 43.0
    /// {{ 42.55|round(1, "floor") }}
    ///   -> 42.5
    /// {{ 42.15|round(method="ceil") }}
    ///   -> 43.0
    /// {{ 1234|round(-2) }}
    ///   -> 1200
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn round(
        value: Value,
        precision: Option<i32>,
        method: Option<&str>,
        kwargs: Kwargs,
    ) -> Result<Value, Error> {
        let precision = match precision {
            Some(precision) => precision,
            None => ok!(kwargs.get::<Option<i32>>("precision")).unwrap_or(0),
        };
        let method = match method {
            Some(method) => method,
            None => ok!(kwargs.get::<Option<&str>>("method")).unwrap_or("common"),
        };
        ok!(kwargs.assert_all_used());
        if !matches!(method, "common" | "ceil" | "floor") {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "method must be common, ceil or floor",
            ));
        }

        match value.0 {
            ValueRepr::I64(_) | ValueRepr::I128(_) | ValueRepr::U64(_) | ValueRepr::U128(_) => {
                if precision >= 0 {
                    return Ok(value);
                }
                let val = ok!(i128::try_from(value));
                round_int(val, precision, method).map(Value::from)
            }
            ValueRepr::F64(val) if method != "common" => {
                round_directed(val, precision, method == "ceil").map(Value::from)
            }
            ValueRepr::F64(val) => {
                let rounded = if precision >= 0 {
                    // Formatting uses round-half-even and, unlike scaling the
                    // value first, preserves the same decimal behavior as Python.
                    if precision > 1074 {
                        val
                    } else {
                        format!("{val:.precision$}", precision = precision as usize)
                            .parse::<f64>()
                            .unwrap()
                    }
                } else {
                    return round_with_negative_precision(val, precision).map(Value::from);
                };
                Ok(Value::from(rounded))
            }
            _ => Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("cannot round value ({})", value.kind()),
            )),
        }
    }

    /// Returns the first item from an iterable.
    ///
    /// If the list is empty `undefined` is returned.
    ///
    /// ```jinja
    /// <dl>
    ///   <dt>primary email
    ///   <dd>{{ user.email_addresses|first|default('no user') }}
    /// </dl>
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn first(value: &Value) -> Result<Value, Error> {
        if let Some(s) = value.as_str() {
            Ok(s.chars().next().map_or(Value::UNDEFINED, Value::from))
        } else if let Some(iter) = value.as_object().and_then(|x| x.try_iter()) {
            checked(iter)
                .next()
                .transpose()
                .map(|x| x.unwrap_or(Value::UNDEFINED))
        } else {
            Err(Error::new(
                ErrorKind::InvalidOperation,
                "cannot get first item from value",
            ))
        }
    }

    /// Returns the last item from an iterable.
    ///
    /// If the list is empty `undefined` is returned.
    ///
    /// ```jinja
    /// <h2>Most Recent Update</h2>
    /// {% with update = updates|last %}
    ///   <dl>
    ///     <dt>Location
    ///     <dd>{{ update.location }}
    ///     <dt>Status
    ///     <dd>{{ update.status }}
    ///   </dl>
    /// {% endwith %}
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn last(value: Value) -> Result<Value, Error> {
        if let Some(string) = value.as_str() {
            Ok(string.chars().next_back().map_or(Value::UNDEFINED, |ch| {
                if value.is_safe() {
                    Value::from_safe_string(ch.to_string())
                } else {
                    Value::from(ch)
                }
            }))
        } else if matches!(value.kind(), ValueKind::Seq | ValueKind::Iterable) {
            let rev = ok!(value.reverse());
            let mut iter = ok!(rev.try_iter()).checked();
            iter.next().transpose().map(Option::unwrap_or_default)
        } else {
            Err(Error::new(
                ErrorKind::InvalidOperation,
                "cannot get last item from value",
            ))
        }
    }

    /// Returns the smallest item from an iterable.
    ///
    /// The filter accepts a few keyword arguments:
    ///
    /// * `case_sensitive`: set to `true` to compare strings case sensitively.
    /// * `attribute`: can be set to an attribute or dotted path to compare by
    ///   that attribute.  The whole item is returned.
    ///
    /// ```jinja
    /// {{ [1, 2, 3, 4]|min }} -> 1
    /// {{ users|min(attribute="age") }}
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn min(state: &State, value: Value, kwargs: Kwargs) -> Result<Value, Error> {
        // like `Iterator::min` this returns the first of equal minimums
        min_max(state, value, kwargs, |ordering| ordering == Ordering::Less)
    }

    /// Returns the largest item from an iterable.
    ///
    /// The filter accepts a few keyword arguments:
    ///
    /// * `case_sensitive`: set to `true` to compare strings case sensitively.
    /// * `attribute`: can be set to an attribute or dotted path to compare by
    ///   that attribute.  The whole item is returned.
    ///
    /// ```jinja
    /// {{ [1, 2, 3, 4]|max }} -> 4
    /// {{ users|max(attribute="age") }}
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn max(state: &State, value: Value, kwargs: Kwargs) -> Result<Value, Error> {
        // like `Iterator::max` this returns the last of equal maximums
        min_max(state, value, kwargs, |ordering| ordering != Ordering::Less)
    }

    fn min_max(
        state: &State,
        value: Value,
        kwargs: Kwargs,
        replaces: fn(Ordering) -> bool,
    ) -> Result<Value, Error> {
        let iter = ok!(state.undefined_behavior().try_iter(value).map_err(|err| {
            Error::new(ErrorKind::InvalidOperation, "cannot convert value to list").with_source(err)
        }));
        let case_sensitive = ok!(kwargs.get::<Option<bool>>("case_sensitive")).unwrap_or(false);
        let attr = ok!(kwargs.get::<Option<&str>>("attribute"));
        let mut rv = None::<(Value, Value)>;
        for item in iter {
            ok!(item.check());
            let key = match attr {
                Some(attr) => item.get_path_or_default(attr, &Value::UNDEFINED),
                None => item.clone(),
            };
            if rv.as_ref().map_or(true, |(rv_key, _)| {
                replaces(cmp_helper(&key, rv_key, case_sensitive, false))
            }) {
                rv = Some((key, item));
            }
        }
        ok!(kwargs.assert_all_used());
        Ok(rv.map_or(Value::UNDEFINED, |(_, item)| item))
    }

    /// Returns the sorted version of the given list.
    ///
    /// The filter accepts a few keyword arguments:
    ///
    /// * `case_sensitive`: set to `true` to make the sorting of strings case sensitive.
    /// * `attribute`: can be set to an attribute or dotted path to sort by that attribute.
    ///   Numeric path segments index into sequences, so `"1"` sorts a list of
    ///   pairs by their second item and `"1.name"` sorts by the `name` of it.
    ///   can be a comma-separated list of attributes forming a composite key like "age, name".
    /// * `reverse`: set to `true` to sort in reverse.
    ///
    /// ```jinja
    /// {{ [1, 3, 2, 4]|sort }} -> [1, 2, 3, 4]
    /// {{ [1, 3, 2, 4]|sort(reverse=true) }} -> [4, 3, 2, 1]
    /// # Sort users by age attribute in ascending order.
    /// {{ users|sort(attribute="age") }}
    /// # Sort users by age attribute in descending order.
    /// {{ users|sort(attribute="age", reverse=true) }}
    /// # Sort (key, user) pairs by the user's name.
    /// {{ pairs|sort(attribute="1.name") }}
    /// # Sort cities by their name, and sort those with the same name by their state.
    /// {{ cities|sort(attribute="name, state") }}
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn sort(state: &State, value: Value, kwargs: Kwargs) -> Result<Value, Error> {
        let items = ok!(ok!(state
            .undefined_behavior()
            .try_iter_checked(value)
            .map_err(|err| {
                Error::new(ErrorKind::InvalidOperation, "cannot convert value to list")
                    .with_source(err)
            }))
        .try_collect_vec());

        let case_sensitive = ok!(kwargs.get::<Option<bool>>("case_sensitive")).unwrap_or(false);
        let reverse = ok!(kwargs.get::<Option<bool>>("reverse")).unwrap_or(false);

        if let Some(attr) = ok!(kwargs.get::<Option<&str>>("attribute")) {
            let keys: Vec<_> = attr
                .split(',')
                .map(str::trim)
                .filter(|key| !key.is_empty())
                .collect();

            let mut keyed: Vec<_> = if keys.len() > 1 {
                // More than one keys
                items
                    .into_iter()
                    .map(|item| {
                        // Like in Jinja2, the parts of the key are compared
                        // case insensitively unless case_sensitive is set.
                        let key = Value::from_iter(keys.iter().map(|k| {
                            let part = item.get_path_or_default(k, &Value::UNDEFINED);
                            match part.as_str() {
                                Some(s) if !case_sensitive => Value::from(fold_case(s)),
                                _ => part,
                            }
                        }));
                        (Some(key), item)
                    })
                    .collect()
            } else {
                // Fast path for a more common case of single key
                let key = if !keys.is_empty() { keys[0] } else { attr };
                items
                    .into_iter()
                    .map(|item| (item.get_path(key).ok(), item))
                    .collect()
            };
            ok!(sort_keyed(&mut keyed, case_sensitive, reverse));
            ok!(kwargs.assert_all_used());
            Ok(Value::from_iter(keyed.into_iter().map(|x| x.1)))
        } else {
            let mut items = items;
            ok!(safe_sort(&mut items, |a, b| cmp_helper(
                a,
                b,
                case_sensitive,
                reverse
            )));
            ok!(kwargs.assert_all_used());
            Ok(Value::from(items))
        }
    }

    /// Converts the input value into a list.
    ///
    /// If the value is already a list, then it's returned unchanged.
    /// Applied to a map this returns the list of keys, applied to a
    /// string this returns the characters.  If the value is undefined
    /// an empty list is returned.
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn list(state: &State, value: Value) -> Result<Value, Error> {
        let iter = ok!(state
            .undefined_behavior()
            .try_iter_checked(value)
            .map_err(|err| {
                Error::new(ErrorKind::InvalidOperation, "cannot convert value to list")
                    .with_source(err)
            }));
        Ok(Value::from(ok!(iter.try_collect_vec())))
    }

    /// Converts a value into a string if it's not one already.
    ///
    /// If the string has been marked as safe, that value is preserved.
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn string(state: &State, value: &Value) -> Result<Value, Error> {
        ok!(state.undefined_behavior().assert_value_not_undefined(value));
        Ok(if value.kind() == ValueKind::String {
            value.clone()
        } else {
            value.to_string().into()
        })
    }

    /// Converts the value into a boolean value.
    ///
    /// This behaves the same as the if statement does with regards to
    /// handling of boolean values.
    ///
    /// ```jinja
    /// {{ 42|bool }} -> true
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn bool(state: &State, value: &Value) -> Result<bool, Error> {
        state.undefined_behavior().is_true(value)
    }

    /// Slice an iterable and return a list of lists containing
    /// those items.
    ///
    /// Useful if you want to create a div containing three ul tags that
    /// represent columns:
    ///
    /// ```jinja
    /// <div class="columnwrapper">
    /// {% for column in items|slice(3) %}
    ///   <ul class="column-{{ loop.index }}">
    ///   {% for item in column %}
    ///     <li>{{ item }}</li>
    ///   {% endfor %}
    ///   </ul>
    /// {% endfor %}
    /// </div>
    /// ```
    ///
    /// If you pass it a second argument it’s used to fill missing values on the
    /// last iteration.
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn slice(
        state: &State,
        value: Value,
        count: usize,
        fill_with: Option<Value>,
    ) -> Result<Value, Error> {
        if count == 0 {
            return Err(Error::new(ErrorKind::InvalidOperation, "count cannot be 0"));
        }
        ok!(crate::bounds::check_items(count, "a sliced or batched sequence"));
        let items = ok!(ok!(state.undefined_behavior().try_iter_checked(value)).try_collect_vec());
        let len = items.len();
        let items_per_slice = len / count;
        let slices_with_extra = len % count;
        let mut offset = 0;
        let mut rv = Vec::with_capacity(untrusted_size_hint(count));

        for slice in 0..count {
            let start = offset + slice * items_per_slice;
            if slice < slices_with_extra {
                offset += 1;
            }
            let end = offset + (slice + 1) * items_per_slice;
            let tmp = &items[start..end];

            if let Some(ref filler) = fill_with {
                if slice >= slices_with_extra {
                    let mut tmp = tmp.to_vec();
                    tmp.push(filler.clone());
                    rv.push(Value::from(tmp));
                    continue;
                }
            }

            rv.push(Value::from(tmp.to_vec()));
        }

        Ok(Value::from(rv))
    }

    /// Batch items.
    ///
    /// This filter works pretty much like `slice` just the other way round. It
    /// returns a list of lists with the given number of items. If you provide a
    /// second parameter this is used to fill up missing items.
    ///
    /// ```jinja
    /// <table>
    ///   {% for row in items|batch(3, '&nbsp;') %}
    ///   <tr>
    ///   {% for column in row %}
    ///     <td>{{ column }}</td>
    ///   {% endfor %}
    ///   </tr>
    ///   {% endfor %}
    /// </table>
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn batch(
        state: &State,
        value: Value,
        count: usize,
        fill_with: Option<Value>,
    ) -> Result<Value, Error> {
        if count == 0 {
            return Err(Error::new(ErrorKind::InvalidOperation, "count cannot be 0"));
        }
        ok!(crate::bounds::check_items(count, "a sliced or batched sequence"));
        let mut rv = Vec::with_capacity(untrusted_size_hint(value.len().unwrap_or(0) / count));
        let mut tmp = Vec::with_capacity(untrusted_size_hint(count));

        for item in ok!(state.undefined_behavior().try_iter(value)) {
            ok!(item.check());
            if tmp.len() == count {
                rv.push(Value::from(mem::replace(
                    &mut tmp,
                    Vec::with_capacity(untrusted_size_hint(count)),
                )));
            }
            tmp.push(item);
        }

        if !tmp.is_empty() {
            if let Some(filler) = fill_with {
                for _ in 0..count - tmp.len() {
                    tmp.push(filler.clone());
                }
            }
            rv.push(Value::from(tmp));
        }

        Ok(Value::from(rv))
    }

    /// Dumps a value to JSON.
    ///
    /// This filter is only available if the `json` feature is enabled.  The resulting
    /// value is safe to use in HTML as well as it will not contain any special HTML
    /// characters.  The optional parameter to the filter can be set to `true` to enable
    /// pretty printing.  Note that the `"` character is left unchanged as it's the
    /// JSON string delimiter.  If you want to pass JSON serialized this way into an
    /// HTTP attribute use single quoted HTML attributes:
    ///
    /// ```jinja
    /// <script>
    ///   const GLOBAL_CONFIG = {{ global_config|tojson }};
    /// </script>
    /// <a href="#" data-info='{{ json_object|tojson }}'>...</a>
    /// ```
    ///
    /// The filter takes one argument `indent` (which can also be passed as keyword
    /// argument for compatibility with Jinja2) which can be set to `true` to enable
    /// pretty printing or an integer to control the indentation of the pretty
    /// printing feature.
    ///
    /// ```jinja
    /// <script>
    ///   const GLOBAL_CONFIG = {{ global_config|tojson(indent=2) }};
    /// </script>
    /// ```
    #[cfg_attr(docsrs, doc(cfg(all(feature = "builtins", feature = "json"))))]
    #[cfg(feature = "json")]
    pub fn tojson(value: &Value, indent: Option<Value>, args: Kwargs) -> Result<Value, Error> {
        let indent = match indent {
            Some(indent) => Some(indent),
            None => ok!(args.get("indent")),
        };
        let indent = match indent {
            None => None,
            Some(ref val) => match bool::try_from(val.clone()).ok() {
                Some(true) => Some(2),
                Some(false) => None,
                None => Some(ok!(usize::try_from(val.clone()))),
            },
        };
        ok!(args.assert_all_used());
        if let Some(indent) = indent {
            ok!(crate::bounds::check_len(
                indent.checked_mul(1 << 16),
                "JSON indented this deep"
            ));
        }
        let style = match indent {
            Some(indent) => crate::json::JsonStyle::Pretty(indent),
            None => crate::json::JsonStyle::Spaced,
        };
        // When this filter is used the return value is safe for both HTML and JSON
        crate::json::to_json(value, style, true)
            .map_err(|err| {
                Error::new(ErrorKind::InvalidOperation, "cannot serialize to JSON").with_source(err)
            })
            .map(Value::from_safe_string)
    }

    /// Indents a value with spaces.
    ///
    /// The first optional parameter to the filter can be set to `true` to
    /// indent the first line. The parameter defaults to false.
    /// The second optional parameter to the filter can be set to `true`
    /// to indent blank lines. The parameter defaults to false.
    /// This filter is useful if you want to template YAML files.
    ///
    /// ```jinja
    /// example:
    ///   config:
    /// {{ global_config|indent(2) }}          # does not indent first line
    /// {{ global_config|indent(2,true) }}     # indent whole Value with two spaces
    /// {{ global_config|indent(2,true,true)}} # indent whole Value and all blank lines
    /// ```
    ///
    /// The parameters can also be provided as keyword arguments for
    /// compatibility with Jinja2: `width`, `first`, and `blank`.
    ///
    /// ```jinja
    /// {{ global_config|indent(width=4, first=true, blank=false) }}
    /// ```
    #[cfg_attr(docsrs, doc(cfg(all(feature = "builtins"))))]
    pub fn indent(
        value: StringInput<'_>,
        width: Option<usize>,
        indent_first_line: Option<bool>,
        indent_blank_lines: Option<bool>,
        kwargs: Kwargs,
    ) -> Result<Value, Error> {
        fn strip_trailing_newline(mut input: &str) -> &str {
            if let Some(stripped) = input.strip_suffix('\n') {
                input = stripped;
            }
            if let Some(stripped) = input.strip_suffix('\r') {
                input = stripped;
            }
            input
        }

        let width = match width {
            Some(width) => width,
            None => ok!(kwargs.get::<Option<usize>>("width")).unwrap_or(4),
        };
        let indent_first_line = match indent_first_line {
            Some(value) => value,
            None => ok!(kwargs.get::<Option<bool>>("first")).unwrap_or(false),
        };
        let indent_blank_lines = match indent_blank_lines {
            Some(value) => value,
            None => ok!(kwargs.get::<Option<bool>>("blank")).unwrap_or(false),
        };
        ok!(kwargs.assert_all_used());

        let input = strip_trailing_newline(value.as_str());
        ok!(crate::bounds::check_len(
            (input.matches('\n').count() + 1)
                .checked_mul(width)
                .and_then(|extra| extra.checked_add(input.len())),
            "an indented string"
        ));
        let indent_with = " ".repeat(width);
        let mut output = String::new();
        let mut iterator = input.split('\n');
        if !indent_first_line {
            output.push_str(iterator.next().unwrap());
            output.push('\n');
        }
        for line in iterator {
            // A blank line in CRLF text is a lone "\r" after splitting on '\n'.
            if line.is_empty() || line == "\r" {
                if indent_blank_lines {
                    output.push_str(&indent_with);
                }
                output.push_str(line);
            } else {
                write!(output, "{indent_with}{line}").ok();
            }
            output.push('\n');
        }
        output.truncate(strip_trailing_newline(&output).len());
        Ok(value.preserve_safety(output))
    }

    /// URL encodes a value.
    ///
    /// If given a map it encodes the parameters into a query set, otherwise it
    /// encodes the stringified value.  If the value is none or undefined, an
    /// empty string is returned.
    ///
    /// ```jinja
    /// <a href="/search?{{ {"q": "my search", "lang": "fr"}|urlencode }}">Search</a>
    /// ```
    #[cfg_attr(docsrs, doc(cfg(all(feature = "builtins", feature = "urlencode"))))]
    #[cfg(feature = "urlencode")]
    pub fn urlencode(value: &Value) -> Result<String, Error> {
        const SET: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
            .remove(b'/')
            .remove(b'.')
            .remove(b'-')
            .remove(b'_')
            .add(b' ');

        if value.kind() == ValueKind::Map {
            let mut rv = String::new();
            for k in ok!(value.try_iter()).checked() {
                let k = ok!(k);
                let v = ok!(value.get_item(&k));
                if v.is_none() || v.is_undefined() {
                    continue;
                }
                if !rv.is_empty() {
                    rv.push('&');
                }
                write!(
                    rv,
                    "{}={}",
                    percent_encoding::utf8_percent_encode(&k.to_string(), SET),
                    percent_encoding::utf8_percent_encode(&v.to_string(), SET)
                )
                .unwrap();
            }
            Ok(rv)
        } else {
            match &value.0 {
                ValueRepr::None | ValueRepr::Undefined(..) => Ok("".into()),
                ValueRepr::Bytes(b) => Ok(percent_encoding::percent_encode(b, SET).to_string()),
                ValueRepr::String(..) | ValueRepr::SmallStr(_) => Ok(
                    percent_encoding::utf8_percent_encode(value.as_str().unwrap(), SET).to_string(),
                ),
                _ => Ok(percent_encoding::utf8_percent_encode(&value.to_string(), SET).to_string()),
            }
        }
    }

    fn select_or_reject(
        state: &mut State,
        invert: bool,
        value: Value,
        attr: Option<Cow<'_, str>>,
        test_name: Option<Cow<'_, str>>,
        args: Vec<Value>,
    ) -> Result<Vec<Value>, Error> {
        let mut rv = vec![];
        let test = if let Some(test_name) = test_name {
            Some(ok!(state
                .env()
                .get_test(&test_name)
                .ok_or_else(|| Error::from(ErrorKind::UnknownTest))))
        } else {
            None
        };
        for value in ok!(state.undefined_behavior().try_iter(value)) {
            ok!(value.check());
            let test_value = if let Some(ref attr) = attr {
                ok!(value.get_path(attr))
            } else {
                value.clone()
            };
            let passed = if let Some(test) = test {
                let new_args = Some(test_value)
                    .into_iter()
                    .chain(args.iter().cloned())
                    .collect::<Vec<_>>();
                ok!(test.call(state, &new_args)).is_true()
            } else {
                test_value.is_true()
            };
            if passed != invert {
                rv.push(value);
            }
        }
        Ok(rv)
    }

    /// Creates a new sequence of values that pass a test.
    ///
    /// Filters a sequence of objects by applying a test to each object.
    /// Only values that pass the test are included.
    ///
    /// If no test is specified, each object will be evaluated as a boolean.
    ///
    /// ```jinja
    /// {{ [1, 2, 3, 4]|select("odd") }} -> [1, 3]
    /// {{ [false, null, 42]|select }} -> [42]
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn select(
        state: &mut State,
        value: Value,
        test_name: Option<Cow<'_, str>>,
        args: crate::value::Rest<ValueOrKwargs>,
    ) -> Result<Vec<Value>, Error> {
        select_or_reject(state, false, value, None, test_name, args.into_values())
    }

    /// Creates a new sequence of values of which an attribute passes a test.
    ///
    /// This functions like [`select`] but it will test an attribute of the
    /// object itself:
    ///
    /// ```jinja
    /// {{ users|selectattr("is_active") }} -> all users where x.is_active is true
    /// {{ users|selectattr("id", "even") }} -> returns all users with an even id
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn selectattr(
        state: &mut State,
        value: Value,
        attr: Cow<'_, str>,
        test_name: Option<Cow<'_, str>>,
        args: crate::value::Rest<ValueOrKwargs>,
    ) -> Result<Vec<Value>, Error> {
        select_or_reject(
            state,
            false,
            value,
            Some(attr),
            test_name,
            args.into_values(),
        )
    }

    /// Creates a new sequence of values that don't pass a test.
    ///
    /// This is the inverse of [`select`].
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn reject(
        state: &mut State,
        value: Value,
        test_name: Option<Cow<'_, str>>,
        args: crate::value::Rest<ValueOrKwargs>,
    ) -> Result<Vec<Value>, Error> {
        select_or_reject(state, true, value, None, test_name, args.into_values())
    }

    /// Creates a new sequence of values of which an attribute does not pass a test.
    ///
    /// This functions like [`select`] but it will test an attribute of the
    /// object itself:
    ///
    /// ```jinja
    /// {{ users|rejectattr("is_active") }} -> all users where x.is_active is false
    /// {{ users|rejectattr("id", "even") }} -> returns all users with an odd id
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn rejectattr(
        state: &mut State,
        value: Value,
        attr: Cow<'_, str>,
        test_name: Option<Cow<'_, str>>,
        args: crate::value::Rest<ValueOrKwargs>,
    ) -> Result<Vec<Value>, Error> {
        select_or_reject(
            state,
            true,
            value,
            Some(attr),
            test_name,
            args.into_values(),
        )
    }

    /// Applies a filter to a sequence of objects or looks up an attribute.
    ///
    /// This is useful when dealing with lists of objects but you are really
    /// only interested in a certain value of it.
    ///
    /// The basic usage is mapping on an attribute. Given a list of users
    /// you can for instance quickly select the username and join on it:
    ///
    /// ```jinja
    /// {{ users|map(attribute='username')|join(', ') }}
    /// ```
    ///
    /// You can specify a `default` value to use if an object in the list does
    /// not have the given attribute.
    ///
    /// ```jinja
    /// {{ users|map(attribute="username", default="Anonymous")|join(", ") }}
    /// ```
    ///
    /// Alternatively you can have `map` invoke a filter by passing the name of the
    /// filter and the arguments afterwards. A good example would be applying a
    /// text conversion filter on a sequence:
    ///
    /// ```jinja
    /// Users on this page: {{ titles|map('lower')|join(', ') }}
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn map(
        state: &mut State,
        value: Value,
        args: crate::value::Rest<ValueOrKwargs>,
    ) -> Result<Vec<Value>, Error> {
        let mut rv = Vec::with_capacity(untrusted_size_hint(value.len().unwrap_or(0)));

        // attribute mapping
        let args = args.into_values();
        let (args, kwargs): (&[Value], Kwargs) = crate::value::from_args(&args)?;

        if let Some(attr) = ok!(kwargs.get::<Option<Value>>("attribute")) {
            if !args.is_empty() {
                return Err(Error::from(ErrorKind::TooManyArguments));
            }
            let default = if kwargs.has("default") {
                ok!(kwargs.get::<Value>("default"))
            } else {
                Value::UNDEFINED
            };
            for value in ok!(state.undefined_behavior().try_iter(value)) {
                ok!(value.check());
                let sub_val = match attr.as_str() {
                    Some(path) => value.get_path(path),
                    None => value.get_item(&attr),
                };
                rv.push(match (sub_val, &default) {
                    (Ok(attr), _) => {
                        if attr.is_undefined() {
                            default.clone()
                        } else {
                            attr
                        }
                    }
                    (Err(_), default) if !default.is_undefined() => default.clone(),
                    (Err(err), _) => return Err(err),
                });
            }
            ok!(kwargs.assert_all_used());
            return Ok(rv);
        }

        // filter mapping
        let filter_name = ok!(args
            .first()
            .ok_or_else(|| Error::new(ErrorKind::InvalidOperation, "filter name is required")));
        let filter_name = ok!(filter_name.as_str().ok_or_else(|| {
            Error::new(ErrorKind::InvalidOperation, "filter name must be a string")
        }));

        let filter = ok!(state
            .env()
            .get_filter(filter_name)
            .ok_or_else(|| Error::from(ErrorKind::UnknownFilter)));
        for value in ok!(state.undefined_behavior().try_iter(value)) {
            ok!(value.check());
            let new_args = Some(value.clone())
                .into_iter()
                .chain(args.iter().skip(1).cloned())
                .collect::<Vec<_>>();
            rv.push(ok!(filter.call(state, &new_args)));
        }
        Ok(rv)
    }

    /// Group a sequence of objects by an attribute.
    ///
    /// The attribute can use dot notation for nested access, like `"address.city"``.
    /// The values are sorted first so only one group is returned for each unique value.
    /// The attribute can be passed as first argument or as keyword argument named
    /// `attribute`.
    ///
    /// For example, a list of User objects with a city attribute can be
    /// rendered in groups. In this example, grouper refers to the city value of
    /// the group.
    ///
    /// ```jinja
    /// <ul>{% for city, items in users|groupby("city") %}
    ///   <li>{{ city }}
    ///   <ul>{% for user in items %}
    ///     <li>{{ user.name }}
    ///   {% endfor %}</ul>
    /// </li>
    /// {% endfor %}</ul>
    /// ```
    ///
    /// groupby yields named tuples of `(grouper, list)``, which can be used instead
    /// of the tuple unpacking above.  As such this example is equivalent:
    ///
    /// ```jinja
    /// <ul>{% for group in users|groupby(attribute="city") %}
    ///   <li>{{ group.grouper }}
    ///   <ul>{% for user in group.list %}
    ///     <li>{{ user.name }}
    ///   {% endfor %}</ul>
    /// </li>
    /// {% endfor %}</ul>
    /// ```
    ///
    /// You can specify a default value to use if an object in the list does not
    /// have the given attribute.
    ///
    /// ```jinja
    /// <ul>{% for city, items in users|groupby("city", default="NY") %}
    ///   <li>{{ city }}: {{ items|map(attribute="name")|join(", ") }}</li>
    /// {% endfor %}</ul>
    /// ```
    ///
    /// Like the [`sort`] filter, sorting and grouping is case-insensitive by default.
    /// The key for each group will have the case of the first item in that group
    /// of values. For example, if a list of users has cities `["CA", "NY", "ca"]``,
    /// the "CA" group will have two values.  This can be disabled by passing
    /// `case_sensitive=True`.
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn groupby(value: Value, attribute: Option<&str>, kwargs: Kwargs) -> Result<Value, Error> {
        let default = ok!(kwargs.get::<Option<Value>>("default")).unwrap_or_default();
        let case_sensitive = ok!(kwargs.get::<Option<bool>>("case_sensitive")).unwrap_or(false);
        let attr = match attribute {
            Some(attr) => attr,
            None => ok!(kwargs.get::<&str>("attribute")),
        };
        let items: Vec<Value> = ok!(checked(ok!(value.try_iter())).try_collect_vec());
        let mut keyed: Vec<_> = items
            .into_iter()
            .map(|item| (Some(item.get_path_or_default(attr, &default)), item))
            .collect();
        ok!(sort_keyed(&mut keyed, case_sensitive, false));
        ok!(kwargs.assert_all_used());

        #[derive(Debug)]
        pub struct GroupTuple {
            grouper: Value,
            list: Vec<Value>,
        }

        impl Object for GroupTuple {
            fn repr(self: &Arc<Self>) -> ObjectRepr {
                ObjectRepr::Seq
            }

            fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
                match (key.as_usize(), key.as_str()) {
                    (Some(0), None) | (None, Some("grouper")) => Some(self.grouper.clone()),
                    (Some(1), None) | (None, Some("list")) => {
                        Some(Value::make_object_iterable(self.clone(), |this| {
                            Box::new(this.list.iter().cloned())
                                as Box<dyn Iterator<Item = _> + Send + Sync>
                        }))
                    }
                    _ => None,
                }
            }

            fn enumerate(self: &Arc<Self>) -> Enumerator {
                Enumerator::Seq(2)
            }

            fn render(self: &Arc<Self>, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_tuple("")
                    .field(&self.grouper)
                    .field(&self.list)
                    .finish()
            }
        }

        let mut rv = Vec::new();
        let mut grouper = None::<Value>;
        let mut list = Vec::new();

        for (group_by, item) in keyed {
            let group_by = group_by.unwrap_or_default();
            if let Some(ref last_grouper) = grouper {
                if cmp_helper(last_grouper, &group_by, case_sensitive, false) != Ordering::Equal {
                    rv.push(Value::from_object(GroupTuple {
                        grouper: last_grouper.clone(),
                        list: std::mem::take(&mut list),
                    }));
                }
            }
            grouper = Some(group_by);
            list.push(item);
        }

        if !list.is_empty() {
            rv.push(Value::from_object(GroupTuple {
                grouper: grouper.unwrap(),
                list,
            }));
        }

        Ok(Value::from_object(rv))
    }

    /// Returns a list of unique items from the given iterable.
    ///
    /// ```jinja
    /// {{ ['foo', 'bar', 'foobar', 'foobar']|unique|list }}
    ///   -> ['foo', 'bar', 'foobar']
    /// ```
    ///
    /// The unique items are yielded in the same order as their first occurrence
    /// in the iterable passed to the filter.  The filter will not detect
    /// duplicate objects or arrays, only primitives such as strings or numbers.
    ///
    /// Optionally the `attribute` keyword argument can be used to make the filter
    /// operate on an attribute instead of the value itself.  In this case only
    /// one city per state would be returned:
    ///
    /// ```jinja
    /// {{ list_of_cities|unique(attribute='state') }}
    /// ```
    ///
    /// Like the [`sort`] filter this operates case-insensitive by default.
    /// For example, if a list has the US state codes `["CA", "NY", "ca"]``,
    /// the resulting list will have `["CA", "NY"]`.  This can be disabled by
    /// passing `case_sensitive=True`.
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn unique(state: &State, values: Value, kwargs: Kwargs) -> Result<Value, Error> {
        use std::collections::BTreeSet;

        let attr = ok!(kwargs.get::<Option<&str>>("attribute"));
        let case_sensitive = ok!(kwargs.get::<Option<bool>>("case_sensitive")).unwrap_or(false);
        ok!(kwargs.assert_all_used());

        let mut rv = Vec::new();
        let mut seen = BTreeSet::new();

        let iter = ok!(state.undefined_behavior().try_iter(values));
        for item in iter {
            ok!(item.check());
            let value_to_compare = if let Some(attr) = attr {
                item.get_path_or_default(attr, &Value::UNDEFINED)
            } else {
                item.clone()
            };
            let memorized_value = if case_sensitive {
                value_to_compare.clone()
            } else if let Some(s) = value_to_compare.as_str() {
                Value::from(s.to_lowercase())
            } else {
                value_to_compare.clone()
            };

            if !seen.contains(&memorized_value) {
                rv.push(item);
                seen.insert(memorized_value);
            }
        }

        Ok(Value::from(rv))
    }

    /// Chain two or more iterable objects as a single iterable object.
    ///
    /// If all the individual objects are dictionaries, then the final chained object
    /// also acts like a dictionary -- you can lookup a key, or iterate over the keys
    /// etc. Note that the dictionaries are not merged, so if there are duplicate keys,
    /// then the lookup will return the value from the last matching dictionary in the
    /// chain.
    ///
    /// If all the individual objects are sequences, then the final chained
    /// object also acts like a list as if the lists are appended.
    ///
    /// Otherwise, the chained object acts like an iterator chaining individual
    /// iterators, but it cannot be indexed.
    ///
    /// ```jinja
    /// {{ users | chain(moreusers) | length }}
    /// {% for user, info in shard0 | chain(shard1, shard2) | dictsort %}
    ///   {{user}}: {{info}}
    /// {% endfor %}
    /// {{ list1 | chain(list2) | attr(1) }}
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn chain(
        _state: &State,
        value: Value,
        others: crate::value::Rest<Value>,
    ) -> Result<Value, Error> {
        let all_values = Some(value.clone())
            .into_iter()
            .chain(others.0.iter().cloned())
            .collect::<Vec<_>>();

        if all_values.iter().all(|v| v.kind() == ValueKind::Map) {
            Ok(Value::from_object(MergeDict::new(all_values)))
        } else if all_values
            .iter()
            .all(|v| matches!(v.kind(), ValueKind::Seq))
        {
            Ok(Value::from_object(MergeSeq::new(all_values)))
        } else {
            // General iterator chaining behavior
            Ok(Value::make_object_iterable(all_values, |values| {
                Box::new(values.iter().flat_map(|v| match v.try_iter() {
                    Ok(iter) => Box::new(iter) as Box<dyn Iterator<Item = Value> + Send + Sync>,
                    Err(err) => Box::new(Some(Value::from(err)).into_iter())
                        as Box<dyn Iterator<Item = Value> + Send + Sync>,
                })) as Box<dyn Iterator<Item = Value> + Send + Sync>
            }))
        }
    }

    /// Zip multiple iterables into tuples.
    ///
    /// This filter works like the Python `zip` function. It takes one or more
    /// iterables and returns an iterable of tuples where each tuple contains
    /// one element from each input iterable. The iteration stops when the
    /// shortest iterable is exhausted.
    ///
    /// ```jinja
    /// {{ [1, 2, 3]|zip(['a', 'b', 'c']) }}
    /// -> [(1, 'a'), (2, 'b'), (3, 'c')]
    ///
    /// {{ [1, 2]|zip(['a', 'b', 'c'], ['x', 'y', 'z']) }}
    /// -> [(1, 'a', 'x'), (2, 'b', 'y')]
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn zip(_state: &State, value: Value, others: Rest<Value>) -> Result<Value, Error> {
        let all_values = Some(value).into_iter().chain(others.0).collect::<Vec<_>>();

        // Validate all values are iterable and calculate minimum length
        let mut known_len: Option<usize> = None;
        for val in &all_values {
            match val.try_iter() {
                Ok(_) => {
                    // If all values have known lengths, track the minimum
                    if let Some(len) = val.len() {
                        known_len = Some(match known_len {
                            None => len,
                            Some(current_min) => current_min.min(len),
                        });
                    } else {
                        // If any value doesn't have a known length, we can't know the zip length
                        known_len = None;
                        break;
                    }
                }
                Err(_) => {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        format!("zip filter argument must be iterable, got {}", val.kind()),
                    ));
                }
            }
        }

        Ok(Value::make_object_iterable(all_values, move |values| {
            let iter = std::iter::from_fn({
                let mut iters = values
                    .iter()
                    .map(|val| val.try_iter().ok())
                    .collect::<Option<Vec<_>>>()
                    .unwrap_or_default();

                move || {
                    if iters.is_empty() {
                        return None;
                    }

                    let mut tuple = Vec::with_capacity(iters.len());
                    for iter in &mut iters {
                        match iter.next().map(Value::validate) {
                            Some(Ok(val)) => tuple.push(val),
                            // invalid values are passed through rather than wrapped
                            // in a tuple, and they end the iteration.
                            Some(Err(err)) => {
                                iters.clear();
                                return Some(Value::from(err));
                            }
                            None => return None,
                        }
                    }
                    Some(Value::from(Tuple::from(tuple)))
                }
            });

            if let Some(len) = known_len {
                Box::new(LenIterWrap(len, iter)) as Box<dyn Iterator<Item = Value> + Send + Sync>
            } else {
                Box::new(iter) as Box<dyn Iterator<Item = Value> + Send + Sync>
            }
        }))
    }

    /// Pretty print a variable.
    ///
    /// This is useful for debugging as it better shows what's inside an object.
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn pprint(value: &Value) -> String {
        format!("{value:#?}")
    }

    /// Apply the given values to a [printf-style] format string.
    ///
    /// ```jinja
    /// {{ "%s, %s!"|format(greeting, name) }}
    /// -> Hello, World!
    /// ```
    ///
    /// In many cases, the [str.format()] style could be more convenient than the
    /// printf-style formatting:
    ///
    /// ```jinja
    /// {{ "{}, {name}!".format(greeting, name="Alice") }}
    /// -> Hello, Alice!
    /// ```
    ///
    /// This option is available through `minijinja-contrib`'s `pycompat` feature.
    ///
    /// [printf-style]: https://docs.python.org/3/library/stdtypes.html#printf-style-string-formatting
    /// [str.format()]: https://docs.python.org/3/library/string.html#format-string-syntax
    #[cfg_attr(docsrs, doc(cfg(feature = "builtins")))]
    pub fn format(
        state: &mut State,
        format_str: &Value,
        format_args: Rest<ValueOrKwargs>,
    ) -> Result<Value, Error> {
        let format_args = format_args.into_values();
        let string = format_str
            .as_str()
            .ok_or_else(|| Error::new(ErrorKind::InvalidOperation, "value is not a string"))?;
        // like any other string conversion, formatting undefined values fails
        // with strict undefined behavior.
        let undefined_behavior = state.undefined_behavior();
        if format_str.is_safe() {
            let output = ok!(format_printf_with(
                string,
                &format_args,
                |value, conversion| {
                    ok!(undefined_behavior.assert_value_not_undefined(value));
                    if conversion == FormatConversion::Character {
                        return Err(Error::new(
                            ErrorKind::InvalidOperation,
                            "character formatting is not supported for safe format strings",
                        ));
                    }

                    // Strings are escaped before applying width and precision,
                    // matching MarkupSafe.  Numbers stay typed so numeric
                    // conversion specifiers continue to work.
                    if value.is_safe()
                        || matches!(value.kind(), ValueKind::Bool | ValueKind::Number)
                    {
                        Ok(None)
                    } else {
                        escape(state, value).map(|value| Some(Value::from(value.as_str().unwrap())))
                    }
                },
            ));
            Ok(Value::from_safe_string(output))
        } else {
            format_printf_with(string, &format_args, |value, _| {
                ok!(undefined_behavior.assert_value_not_undefined(value));
                Ok(None)
            })
            .map(Value::from)
        }
    }
}

#[cfg(feature = "builtins")]
pub use self::builtins::*;
