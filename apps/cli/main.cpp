// apps/cli: placeholder until the CLI lands.
int main() { return 0; }
