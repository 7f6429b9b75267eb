//! The allocation wrappers `mallocshim heap` looks through: a frame whose (demangled) function
//! matches one of these patterns is not a call site; the sample's call site is its first frame
//! that matches none. Patterns are globs (`*` any run of characters), matched against the whole
//! name and against the name without its parameter list. Owns the list only; no I/O.

/// The built-in list: the C allocation calls, C++'s `operator new`, and MariaDB's wrappers
/// (mysys `my_malloc.c`, `my_once.c`, `my_alloc.c`, `mulalloc.c`; InnoDB `mem0mem`, `ut0new.h`;
/// the SQL layer's arena allocators), checked against MariaDB's source: each allocates on behalf
/// of its caller, which is what a DBA wants to see.
pub const BUILTIN: &[&str] = &[
    "malloc",
    "calloc",
    "realloc",
    "reallocarray",
    "posix_memalign",
    "aligned_alloc",
    "memalign",
    "valloc",
    "pvalloc",
    "strdup",
    "strndup",
    "__libc_*alloc*",
    "__GI___libc_*alloc*",
    "operator new*",
    "operator new[]*",
    "__gnu_cxx::new_allocator*",
    "std::__new_allocator*",
    "std::allocator*",
    "std::allocator_traits*",
    "my_malloc",
    "my_realloc",
    "my_memdup",
    "my_strdup",
    "my_strndup",
    "my_multi_malloc",
    "my_multi_malloc_large",
    "my_large_malloc",
    "my_once_alloc",
    "my_once_memdup",
    "my_once_strdup",
    "alloc_root",
    "multi_alloc_root",
    "memdup_root",
    "strdup_root",
    "strmake_root",
    "mem_heap_*",
    "ut_allocator*",
    "ut_malloc*",
    "ut_zalloc*",
    "ut_realloc*",
    "Sql_alloc::operator new*",
    "Query_arena::alloc",
    "Query_arena::calloc",
    "Query_arena::memdup*",
    "Query_arena::strdup",
    "Query_arena::strmake",
    "thd_alloc",
    "thd_calloc",
    "thd_memdup",
    "thd_strdup",
    "thd_strmake",
];

/// The wrapper patterns in force: the built-in list plus the user's.
pub struct Wrappers {
    patterns: Vec<String>,
}

impl Wrappers {
    /// The built-in list (unless `builtin` is false) plus `extra`.
    pub fn new(builtin: bool, extra: &[String]) -> Wrappers {
        let mut patterns: Vec<String> =
            if builtin { BUILTIN.iter().map(|s| s.to_string()).collect() } else { Vec::new() };
        patterns.extend(extra.iter().cloned());
        Wrappers { patterns }
    }

    /// Whether `name` is an allocation wrapper.
    pub fn is_wrapper(&self, name: &str) -> bool {
        let bare = strip_params(name);
        self.patterns.iter().any(|p| glob(p, name) || glob(p, bare))
    }
}

/// `name` without its parameter list (`f(int)` → `f`; `operator()` and templates kept whole).
fn strip_params(name: &str) -> &str {
    if name.ends_with(')') && !name.ends_with("operator()") {
        let mut depth = 0i32;
        for (i, c) in name.char_indices().rev() {
            match c {
                ')' => depth += 1,
                '(' => {
                    depth -= 1;
                    if depth == 0 {
                        return &name[..i];
                    }
                }
                _ => {}
            }
        }
    }
    name
}

/// Glob match: `*` matches any run of characters, everything else itself.
pub fn glob(pattern: &str, s: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = s.chars().collect();
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && p[pi] != '*' && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches() {
        let w = Wrappers::new(true, &["my_*_alloc".into()]);
        assert!(w.is_wrapper("my_malloc"));
        assert!(w.is_wrapper("operator new(unsigned long)"));
        assert!(w.is_wrapper("operator new[](unsigned long)"));
        assert!(w.is_wrapper("ut_allocator<unsigned char, true>::allocate(unsigned long, unsigned char const*, unsigned int, bool, bool)"));
        assert!(w.is_wrapper("mem_heap_create_block_func"));
        assert!(w.is_wrapper("my_big_alloc"));
        assert!(!w.is_wrapper("my_malloc_size_cb_func"));
        assert!(!w.is_wrapper("filesort(THD*, TABLE*)"));
        assert!(!w.is_wrapper("mallocx"));
    }
}
