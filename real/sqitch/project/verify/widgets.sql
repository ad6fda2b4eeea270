SELECT id, name FROM widgets WHERE false;
