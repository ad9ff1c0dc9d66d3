<?php
// TechEmpower's Fortunes: the table's rows and one added at request time,
// sorted by message, HTML-escaped into the benchmark's page.
require __DIR__ . '/world.inc.php';

$stmt = world_db()->prepare('SELECT id, message FROM Fortune');
$stmt->execute();
$fortunes = $stmt->fetchAll(PDO::FETCH_KEY_PAIR);
$fortunes[0] = 'Additional fortune added at request time.';
asort($fortunes, SORT_STRING);

header('Content-Type: text/html; charset=utf-8');
echo '<!DOCTYPE html><html><head><title>Fortunes</title></head><body><table>',
     '<tr><th>id</th><th>message</th></tr>';
foreach ($fortunes as $id => $message) {
    echo '<tr><td>', $id, '</td><td>',
         htmlspecialchars($message, ENT_QUOTES, 'UTF-8'), '</td></tr>';
}
echo '</table></body></html>';
