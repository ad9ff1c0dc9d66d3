<?php
// TechEmpower's updates: ?queries=N rows of World (N as in queries.php)
// read each by its own query, given a new random number and written back
// one UPDATE each, as a JSON array of the rows as written.
require __DIR__ . '/world.inc.php';

$n = $_GET['queries'] ?? '1';
$n = ctype_digit($n) ? max(1, min(500, (int)$n)) : 1;

$db = world_db();
$select = $db->prepare('SELECT id, randomNumber FROM World WHERE id = ?');
$update = $db->prepare('UPDATE World SET randomNumber = ? WHERE id = ?');
$out = [];
for ($i = 0; $i < $n; $i++) {
    $select->execute([mt_rand(1, 10000)]);
    $row = $select->fetch(PDO::FETCH_NUM);
    $world = ['id' => $row[0], 'randomNumber' => mt_rand(1, 10000)];
    $update->execute([$world['randomNumber'], $world['id']]);
    $out[] = $world;
}

header('Content-Type: application/json');
echo json_encode($out);
