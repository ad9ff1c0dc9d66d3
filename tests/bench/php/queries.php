<?php
// TechEmpower's multiple queries: ?queries=N rows of World (N clamped to
// 1..500, a missing or bad value is 1), each a query of its own by the
// one prepared statement, as a JSON array.
require __DIR__ . '/world.inc.php';

$n = $_GET['queries'] ?? '1';
$n = ctype_digit($n) ? max(1, min(500, (int)$n)) : 1;

$stmt = world_db()->prepare('SELECT id, randomNumber FROM World WHERE id = ?');
$out = [];
for ($i = 0; $i < $n; $i++) {
    $stmt->execute([mt_rand(1, 10000)]);
    $row = $stmt->fetch(PDO::FETCH_NUM);
    $out[] = ['id' => $row[0], 'randomNumber' => $row[1]];
}

header('Content-Type: application/json');
echo json_encode($out);
