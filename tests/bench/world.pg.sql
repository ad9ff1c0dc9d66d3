-- TechEmpower's World and Fortune tables for PostgreSQL, as their
-- toolset's create-postgres.sql makes them: World holds 10,000 rows of a
-- random number in 1..10000, Fortune the benchmark's 12 messages (the
-- fortunes handler adds the 13th at request time). Unquoted names, so
-- PostgreSQL folds them: tables world and fortune, columns id,
-- randomnumber, message. Loaded by tests/bench/world-db as the user of
-- its URL (the tables are that user's: TechEmpower's GRANTs to
-- benchmarkdbuser are left out, that user being the owner here); the
-- DROPs make a second load start afresh.

BEGIN;

DROP TABLE IF EXISTS World;
DROP TABLE IF EXISTS Fortune;

CREATE TABLE World (
  id integer NOT NULL,
  randomNumber integer NOT NULL default 0,
  PRIMARY KEY (id)
);

INSERT INTO World (id, randomNumber)
SELECT x.id, least(floor(random() * 10000 + 1), 10000)
FROM generate_series(1, 10000) AS x(id);

CREATE TABLE Fortune (
  id integer NOT NULL,
  message varchar(2048) NOT NULL,
  PRIMARY KEY (id)
);

INSERT INTO Fortune (id, message) VALUES (1, 'fortune: No such file or directory');
INSERT INTO Fortune (id, message) VALUES (2, 'A computer scientist is someone who fixes things that aren''t broken.');
INSERT INTO Fortune (id, message) VALUES (3, 'After enough decimal places, nobody gives a damn.');
INSERT INTO Fortune (id, message) VALUES (4, 'A bad random number generator: 1, 1, 1, 1, 1, 4.33e+67, 1, 1, 1');
INSERT INTO Fortune (id, message) VALUES (5, 'A computer program does what you tell it to do, not what you want it to do.');
INSERT INTO Fortune (id, message) VALUES (6, 'Emacs is a nice operating system, but I prefer UNIX. — Tom Christaensen');
INSERT INTO Fortune (id, message) VALUES (7, 'Any program that runs right is obsolete.');
INSERT INTO Fortune (id, message) VALUES (8, 'A list is only as strong as its weakest link. — Donald Knuth');
INSERT INTO Fortune (id, message) VALUES (9, 'Feature: A bug with seniority.');
INSERT INTO Fortune (id, message) VALUES (10, 'Computers make very fast, very accurate mistakes.');
INSERT INTO Fortune (id, message) VALUES (11, '<script>alert("This should not be displayed in a browser alert box.");</script>');
INSERT INTO Fortune (id, message) VALUES (12, 'フレームワークのベンチマーク');

ANALYZE World;
ANALYZE Fortune;

COMMIT;
