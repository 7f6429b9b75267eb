-- scripts/fulltext-phrase.lua: the sysbench workload of scripts/fulltext-check.sh. Each event is
-- one InnoDB FULLTEXT phrase search on the generated table (default `docs`):
--   SELECT COUNT(*) FROM docs WHERE MATCH(body) AGAINST('"w1 w2"' IN BOOLEAN MODE)
-- where w1 and w2 are word(k) for k drawn uniformly in [--ft_lo, --ft_hi] (the same word(k) as in
-- fulltext-check.sh: three syllables picked by the bits of k; word k is the k-th most frequent),
-- so every search reads long posting lists and InnoDB builds its large per-query heaps. The
-- default band 6-40 gives a few queries per second per core on 300,000 documents (the top few
-- words take ~20 s per phrase search; words past ~300 match almost nothing).
-- sysbench's own counters give the qps; any SQL error is fatal (sysbench exits non-zero).

sysbench.cmdline.options = {
    ft_table = {"table holding the FULLTEXT index on `body`", "docs"},
    ft_lo = {"most frequent word rank used in phrases", 6},
    ft_hi = {"least frequent word rank used in phrases", 40},
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
    local lo, hi = sysbench.opt.ft_lo, sysbench.opt.ft_hi
    local a = word(sysbench.rand.uniform(lo, hi))
    local b = word(sysbench.rand.uniform(lo, hi))
    con:query(string.format(
        "SELECT COUNT(*) FROM %s WHERE MATCH(body) AGAINST('\"%s %s\"' IN BOOLEAN MODE)",
        sysbench.opt.ft_table, a, b))
end

function thread_done()
    con:disconnect()
end
