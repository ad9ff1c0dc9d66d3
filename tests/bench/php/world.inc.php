<?php
// The connection the scripts share: PDO to PostgreSQL (Debian's
// php8.2-pgsql), persistent (one per php-fpm child, kept between
// requests, as TechEmpower's PHP entries keep theirs), errors as
// exceptions. nginx passes DB_PORT (tests/bench/run: the profile's own
// PostgreSQL on 127.0.0.1); the names are TechEmpower's.
function world_db(): PDO
{
    static $pdo = null;
    if ($pdo === null) {
        $pdo = new PDO('pgsql:host=127.0.0.1;port=' . (int)$_SERVER['DB_PORT']
                       . ';dbname=hello_world',
                       'benchmarkdbuser', 'benchmarkdbpass',
                       [PDO::ATTR_PERSISTENT => true,
                        PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION]);
    }
    return $pdo;
}
