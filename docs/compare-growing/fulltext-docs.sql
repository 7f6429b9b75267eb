-- docs/compare-growing/fulltext-docs.sql: `mallocshim compare --prepare-sql` for a workload whose
-- memory grows (docs/compare.md, "A workload that grows memory"). Run once on database sbtest
-- after sysbench's dataset: table `docs`, 50,000 documents of 30 words with an InnoDB FULLTEXT
-- index, the vocabulary and word frequencies of crates/mallocshim-mariadb/workloads/
-- fulltext-phrase.lua (word k = three syllables picked by the bits of k, k = 4096 r^3 so a few
-- words are in most documents). Phrase searches over it make InnoDB build large per-query
-- heaps, the load under which a server's RSS was seen to grow (issue 38).
-- The recursive CTEs below run past MariaDB's default of 1000 iterations.
SET SESSION max_recursive_iterations = 100000;
CREATE TABLE words (k INT PRIMARY KEY, w VARCHAR(8) NOT NULL) ENGINE=InnoDB;
INSERT INTO words
  WITH RECURSIVE s(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM s WHERE k < 4095)
  SELECT k, CONCAT(
    ELT(1 + k % 16, 'ka','lo','mi','ne','pu','ra','si','to','vu','ze','bo','da','fe','gi','hu','ja'),
    ELT(1 + (k DIV 16) % 16, 'ka','lo','mi','ne','pu','ra','si','to','vu','ze','bo','da','fe','gi','hu','ja'),
    ELT(1 + (k DIV 256) % 16, 'ka','lo','mi','ne','pu','ra','si','to','vu','ze','bo','da','fe','gi','hu','ja'))
  FROM s;
CREATE TABLE picks (n INT NOT NULL, k INT NOT NULL) ENGINE=InnoDB;
INSERT INTO picks
  WITH RECURSIVE d(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM d WHERE n < 50000),
                 j(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM j WHERE i < 30)
  SELECT d.n, LEAST(4095, FLOOR(4096 * POW(RAND(7), 3))) FROM d, j;
CREATE TABLE docs (id INT PRIMARY KEY, body TEXT NOT NULL) ENGINE=InnoDB;
INSERT INTO docs
  SELECT p.n, GROUP_CONCAT(w.w SEPARATOR ' ') FROM picks p JOIN words w ON w.k = p.k GROUP BY p.n;
ALTER TABLE docs ADD FULLTEXT INDEX body_ft (body);
DROP TABLE picks;
