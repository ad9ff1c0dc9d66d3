<?php
// TechEmpower's single query on nginx + php-fpm with PDO (the stack the
// database profiles compare fastd with: tests/bench/run db --vs php).
// One random row of World as JSON, by a prepared statement on a
// persistent connection. nginx passes the database's port as DB_PORT.
require __DIR__ . '/world.inc.php';

$stmt = world_db()->prepare('SELECT id, randomNumber FROM World WHERE id = ?');
$stmt->execute([mt_rand(1, 10000)]);
$row = $stmt->fetch(PDO::FETCH_NUM);

header('Content-Type: application/json');
echo json_encode(['id' => $row[0], 'randomNumber' => $row[1]]);
