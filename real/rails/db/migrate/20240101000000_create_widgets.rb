class CreateWidgets < ActiveRecord::Migration[6.1]
  def change
    create_table :widgets do |t|
      t.string :name
    end
    execute "SELECT pg_sleep(#{Float(ENV.fetch('PGCHAOS_MIGRATION_SLEEP', '1'))})"
  end
end
