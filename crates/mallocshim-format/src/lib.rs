//! The dump and memlog formats of mallocshim: one typed schema shared by the writer (the shim)
//! and every reader (the command-line tool, the comparison runner, tests, benches).
