-- The TechEmpower benchmark's tables for SQLite: World (10,000 rows of
-- random numbers in 1..10000) and Fortune (its 12 rows). fastd runs this
-- once, when [database world] url = sqlite:PATH does not exist yet
-- (init = conf/world.sqlite.sql); tests/bench/world-db does the same for
-- PostgreSQL.
CREATE TABLE World (
    id INTEGER PRIMARY KEY,
    randomNumber INTEGER NOT NULL DEFAULT 0
);
WITH RECURSIVE n(id) AS (SELECT 1 UNION ALL SELECT id + 1 FROM n WHERE id < 10000)
INSERT INTO World (id, randomNumber) SELECT id, abs(random()) % 10000 + 1 FROM n;
CREATE TABLE Fortune (
    id INTEGER PRIMARY KEY,
    message TEXT NOT NULL
);
INSERT INTO Fortune (id, message) VALUES
    (1, 'fortune: No such file or directory'),
    (2, 'A computer scientist is someone who fixes things that aren''t broken.'),
    (3, 'After enough decimal places, nobody gives a damn.'),
    (4, 'A bad random number generator: 1, 1, 1, 1, 1, 4.33e+67, 1, 1, 1'),
    (5, 'A computer program does what you tell it to do, not what you want it to do.'),
    (6, 'Emacs is a nice operating system, but I prefer UNIX. — Tom Christaensen'),
    (7, 'Any program that runs right is obsolete.'),
    (8, 'A list is only as strong as its weakest link. — Donald Knuth'),
    (9, 'Feature: A bug with seniority.'),
    (10, 'Computers make very fast, very accurate mistakes.'),
    (11, '<script>alert("This should not be displayed in a browser alert box.");</script>'),
    (12, 'フレームワークのベンチマーク');
