-- docs/compare-growing/fulltext-phrase.lua: `mallocshim compare --workloads` for the table of
-- fulltext-docs.sql (docs/compare.md, "A workload that grows memory"). Each event is one InnoDB
-- FULLTEXT phrase search, as in crates/mallocshim-mariadb/workloads/fulltext-phrase.lua:
--   SELECT COUNT(*) FROM docs WHERE MATCH(body) AGAINST('"w1 w2"' IN BOOLEAN MODE)
-- with w1, w2 = word(k), k uniform in [--ft_lo, --ft_hi] (word k is the k-th most frequent).
-- compare gives every sysbench run --tables and --table-size; a script that declares options
-- must declare those two as well (sysbench refuses an option it does not know).

sysbench.cmdline.options = {
    ft_lo = {"most frequent word rank used in phrases", 6},
    ft_hi = {"least frequent word rank used in phrases", 40},
    tables = {"(given by mallocshim compare; unused)", 1},
    table_size = {"(given by mallocshim compare; unused)", 1},
}

local SYL = {"ka", "lo", "mi", "ne", "pu", "ra", "si", "to", "vu", "ze", "bo", "da", "fe", "gi", "hu", "ja"}

local function word(k)
    return SYL[(k % 16) + 1] .. SYL[(math.floor(k / 16) % 16) + 1] .. SYL[(math.floor(k / 256) % 16) + 1]
end

function thread_init()
    drv = sysbench.sql.driver()
    con = drv:connect()
end

function event()
    local a = word(sysbench.rand.uniform(sysbench.opt.ft_lo, sysbench.opt.ft_hi))
    local b = word(sysbench.rand.uniform(sysbench.opt.ft_lo, sysbench.opt.ft_hi))
    con:query(string.format(
        "SELECT COUNT(*) FROM docs WHERE MATCH(body) AGAINST('\"%s %s\"' IN BOOLEAN MODE)", a, b))
end

function thread_done()
    con:disconnect()
end
